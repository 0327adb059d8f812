"""Every renderer of the command line, one module per feature (rich is imported here and in the cli only).

``console`` what every renderer shares (the consoles, :func:`~console.safe`, the JSON document, token counts);
``results`` the reports of `edit`, `oom`, `rollback`, `status` and `backups`, the recap and the live progress;
``diagnose``; ``plan`` (the plan table and its explanation); ``bench`` (the sweep table, its progress bar).
Renderers take values (results, documents) and a Console; they never decide exit codes and never call the api.
"""
