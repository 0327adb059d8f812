"""`remediate watch`: the loop that polls every watched host, decides under the rails and acts."""
