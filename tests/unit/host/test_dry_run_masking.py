"""`oom --dry-run` on a unit whose ExecStart is a quoted ``bash -c "HF_TOKEN=… exec python3 -m sglang…"``:
the edited line shows as a change (``-``/``+``), only the token masked (issue 20: a quote before NAME= made
masking run to the closing quote, and the edited ExecStart showed as an unchanged context line)."""

from __future__ import annotations

from tests.support.hosts import oom_host as make_host
from tests.support.hosts import run_oom as run

SCRIPT = (
    "HF_TOKEN=hf_Quoted8 exec /opt/sglang/bin/python3 -m sglang.launch_server --model-path /models/Kimi-K2.6 "
    "--tp 8 --host 0.0.0.0 --port 30000 --mem-fraction-static 0.94"
)
UNIT = f'[Unit]\nDescription=sglang\n\n[Service]\nExecStart=/bin/bash -c "{SCRIPT}"\n'


def test_the_dry_run_diff_shows_the_quoted_bash_c_change_with_only_the_token_masked() -> None:
    host = make_host(UNIT, argv=["/bin/bash", "-c", SCRIPT])
    result = run(host, dry_run=True)
    assert result.error is None and result.changed is True, result.error
    masked = SCRIPT.replace("hf_Quoted8", "***")
    assert f'-ExecStart=/bin/bash -c "{masked}"\n' in result.diff, result.diff
    assert f'+ExecStart=/bin/bash -c "{masked.replace("0.94", "0.93")}' in result.diff, result.diff
    assert "hf_Quoted8" not in result.diff and "hf_Quoted8" not in str(result.to_dict())
    assert host.scripts("# remediate commit") == []
