"""Secret masking: every form a secret scanner knows, and the properties that keep it honest (idempotent,
line by line, nothing outside a secret's value touched, never a flag we edit). Time is measured by
bench/masking.py (tests/bench), never asserted here."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import example, given, settings
from hypothesis import strategies as st

from remediate.cli import cli
from remediate.core.unitfile.report import unified_diff
from remediate.core.unitfile.secrets import mask_secrets


@pytest.mark.parametrize(
    ("text", "masked"),
    [
        # a quote before NAME= that opens a script: only the value is masked, the flags stay visible
        (
            'ExecStart=/bin/bash -c "HF_TOKEN=x exec python3 -m sglang.launch_server --mem-fraction-static 0.94"',
            'ExecStart=/bin/bash -c "HF_TOKEN=*** exec python3 -m sglang.launch_server --mem-fraction-static 0.94"',
        ),
        (
            "sh -c 'API_KEY=k; exec python3 --chunked-prefill-size 8192'",
            "sh -c 'API_KEY=***; exec python3 --chunked-prefill-size 8192'",
        ),
        ('Environment="DB_PASSWORD=p4ss word" B=1', 'Environment="DB_PASSWORD=***" B=1'),
        ('Environment="DB_PASSWORD=p4ss -word x=y"', 'Environment="DB_PASSWORD=***"'),  # not a script: all of it
        ("docker run -e 'HF_TOKEN=a b' img", "docker run -e 'HF_TOKEN=***' img"),
        ("bash -lc 'HF_TOKEN=a exec python3'", "bash -lc 'HF_TOKEN=*** exec python3'"),
        # not a -c script, yet the edited flag stays visible
        (
            'ssh h "HF_TOKEN=x exec python3 --mem-fraction-static 0.94"',
            'ssh h "HF_TOKEN=*** --mem-fraction-static 0.94"',
        ),
        # systemd.exec(5): SetCredential=ID:VALUE
        ("SetCredential=hf-token:hf_abc123", "SetCredential=***"),
        ("SetCredentialEncrypted=db:k6iUCUh0RdCdlTBaVxXR", "SetCredentialEncrypted=***"),
        # header-ish values, wherever they appear
        ("Environment=AUTH_HEADER=Bearer sk-abc.123", "Environment=AUTH_HEADER=***"),
        ('Environment="AUTH_HEADER=Bearer sk-abc.123"', 'Environment="AUTH_HEADER=***"'),
        ("curl -H 'Authorization: Bearer eyJhbGci.x-y_z' http://h", "curl -H 'Authorization: Bearer ***' http://h"),
        ("Authorization: Basic dXNlcjpwYXNzd29yZA==", "Authorization: Basic ***"),
        ("Basic setup done", "Basic setup done"),  # prose, not base64
        # secret HTTP headers (issue 31), bare, in argv quotes, in Environment="…"; any case
        ("X-Api-Key: sk-1", "X-Api-Key: ***"),
        ("api-key: sk-1", "api-key: ***"),
        ("Api-Key:sk-1 next", "Api-Key:*** next"),
        ("X-API-KEY: sk-1", "X-API-KEY: ***"),
        ("Authorization: token ghp_abc", "Authorization: token ***"),
        ("Authorization: Basic abc", "Authorization: Basic ***"),  # short, yet in its header: masked
        ("Authorization: Bearer t0k", "Authorization: Bearer ***"),
        ("Authorization: sk-raw", "Authorization: ***"),  # no scheme: the whole value
        ("Proxy-Authorization: Basic Zm9vOmJhcg==", "Proxy-Authorization: Basic ***"),
        ("Cookie: a=b; c=d", "Cookie: ***"),  # every pair, the first one too
        ("Set-Cookie: sid=s3; Path=/; HttpOnly", "Set-Cookie: ***"),
        ("X-Auth-Token: t1 rest", "X-Auth-Token: *** rest"),
        ("Private-Token: glpat-1", "Private-Token: ***"),
        (
            'curl --header "X-Api-Key: a b" --header "Cookie: a=b; c=d" http://h',
            'curl --header "X-Api-Key: ***" --header "Cookie: ***" http://h',
        ),
        (
            "curl -H 'Authorization: token ghp_1' -H 'X-Auth-Token: t' http://h",
            "curl -H 'Authorization: token ***' -H 'X-Auth-Token: ***' http://h",
        ),
        ('Environment="HDR=Authorization: Bearer abc"', 'Environment="HDR=Authorization: Bearer ***"'),
        ('Environment="OPTS=-H X-Api-Key: abc" B=1', 'Environment="OPTS=-H X-Api-Key: ***" B=1'),
        ("Cookie: a=b --mem-fraction-static 0.9", "Cookie: *** --mem-fraction-static 0.9"),  # never a flag we edit
        # headers that are not secret, and sglang's log counters
        ("Content-Type: text/plain #token: 81234 tokens: 5", "Content-Type: text/plain #token: 81234 tokens: 5"),
        ("Prefill batch. #new-token: 7, #cached-token: 0,", "Prefill batch. #new-token: 7, #cached-token: 0,"),
        ("http://h:8000/v1 Host: h", "http://h:8000/v1 Host: h"),
        (
            "X_CUSTOM_HEADER=abc HTTP_AUTHORIZATION=def GOOGLE_CREDENTIALS=/c.json",
            "X_CUSTOM_HEADER=*** HTTP_AUTHORIZATION=*** GOOGLE_CREDENTIALS=***",
        ),
        # names a secret scanner knows
        (
            "OPENAI_APIKEY=sk-1 MYAPIKEY=2 AZURE_OPENAI_API_KEY=3",
            "OPENAI_APIKEY=*** MYAPIKEY=*** AZURE_OPENAI_API_KEY=***",
        ),
        (
            "AWS_ACCESS_KEY_ID=AKIA1 AWS_SECRET_ACCESS_KEY=s3 DB_PASS=p REDIS_PASSWD=q",
            "AWS_ACCESS_KEY_ID=*** AWS_SECRET_ACCESS_KEY=*** DB_PASS=*** REDIS_PASSWD=***",
        ),
        ("--openai-apikey zz --tokenizer-path /t", "--openai-apikey *** --tokenizer-path /t"),
        # an '@' in a proxy password: the last '@' before the host ends the userinfo
        ("HTTPS_PROXY=http://user:p@ss@proxy:3128", "HTTPS_PROXY=http://user:***@proxy:3128"),
        (
            "http_proxy=http://u:a@b@c@proxy.example:8080/ NO_PROXY=x",
            "http_proxy=http://u:***@proxy.example:8080/ NO_PROXY=x",
        ),
        # not secrets
        (
            "TOKENIZERS_PARALLELISM=false PWD=/srv KEYS=1 MONKEY=2 PASSFILE=/p",
            "TOKENIZERS_PARALLELISM=false PWD=/srv KEYS=1 MONKEY=2 PASSFILE=/p",
        ),
        ("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True", "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"),
        # a value never swallows a flag we edit, even through an odd quote
        ('HF_TOKEN=a"b --mem-fraction-static 0.9"', 'HF_TOKEN=*** --mem-fraction-static 0.9"'),
        # sglang 0.5.23 logs its args as a dict (entrypoints/engine.py _server_args_for_logging): the keys are quoted
        (
            "server_args={'model_path': 'm', 'api_key': 'sk-abc', 'hf_token': None, 'tp_size': 8}",
            "server_args={'model_path': 'm', 'api_key': '***', 'hf_token': ***, 'tp_size': 8}",
        ),
        (
            '{"hf_token": "hf_a b", "tokenizer_path": "/t", "max_total_tokens": 9}',
            '{"hf_token": "***", "tokenizer_path": "/t", "max_total_tokens": 9}',
        ),  # fmt: skip
        ('{"ssl_keyfile_password":null}', '{"ssl_keyfile_password":***}'),
        # the dataclass repr: a literal keeps the repr's comma
        ("ServerArgs(hf_token=None, api_key='k', tp_size=8)", "ServerArgs(hf_token=***, api_key='***', tp_size=8)"),
    ],
)
def test_masked_forms(text: str, masked: str) -> None:
    assert mask_secrets(text) == masked


def test_the_quoted_bash_c_edit_shows_as_a_change_in_the_diff() -> None:
    before = 'ExecStart=/bin/bash -c "HF_TOKEN=x exec python3 -m sglang.launch_server --mem-fraction-static 0.94"\n'
    after = before.replace("0.94", "0.93")
    diff = unified_diff("/u.service", before, after)
    assert "-ExecStart" in diff and "+ExecStart" in diff and "0.93" in diff and "HF_TOKEN=***" in diff


_WORD = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789/.:-_", min_size=1, max_size=12)
_SECRET = st.text(
    alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789@%+/=._~", min_size=1, max_size=24
)
_NAMES = [
    "HF_TOKEN",
    "OPENAI_API_KEY",
    "OPENAI_APIKEY",
    "DB_PASSWORD",
    "AUTH_HEADER",
    "AWS_SECRET_ACCESS_KEY",
    "DB_PASS",
]
_SAFE = st.lists(st.sampled_from(["exec", "python3", "-m", "sglang.launch_server", "--port", "30000", "--model-path",
                                  "/models/m", "--tp", "8", "A=1", "Environment=CUDA_HOME=/c", "ExecStart=/bin/x"]),
                 max_size=6).map(" ".join)  # fmt: skip
# Shell-ish text with the characters that steer masking: quotes, escapes, '=', '@', '://', blanks, operators.
_PIECES = [*"aZ09_=-@:/ \t'\"\\;&|()", "TOKEN=", "--api-key ", "http://u:p@", "Bearer ", "\n"]
_PIECES += ["X-Api-Key:", "Cookie: ", "Authorization: ", "token ", "X-Auth-Token:", "; "]
_NOISY = st.lists(st.sampled_from(_PIECES), max_size=30).map("".join)
_FLAG = st.sampled_from(
    ["--mem-fraction-static", "--chunked-prefill-size", "--mem-frac", "--chunked-prefill", "PYTORCH_CUDA_ALLOC_CONF="]
)
_VALUE = st.sampled_from(
    ["0.94", "0.93", "4096", "8192", "-1", "expandable_segments:True", "expandable_segments:False"]
)


@settings(max_examples=400, deadline=None)
@given(_NOISY)
@example("TOKEN=Bearer a@")  # the value stopped at the credential's last token character: '***@', then '***'
@example("Cookie: 0)")  # a header value ending in a literal's punctuation: '***)' must stay '***)'
@example("http://u:p@X-Auth-Token:/;@")  # the header's mask removes the '/' that ended the URL's password
def test_masking_is_idempotent(text: str) -> None:
    once = mask_secrets(text)
    assert mask_secrets(once) == once


@settings(max_examples=400, deadline=None)
@given(st.lists(_NOISY.map(lambda t: t.replace("\n", "").replace("\r", "").rstrip("\\")), min_size=1, max_size=5))
def test_masking_a_text_is_masking_each_of_its_lines(lines: list[str]) -> None:
    """No mask crosses a line end (lines without a continuation backslash): a 5000-line journal costs 5000
    lines' worth, and a long line costs what its pieces between line ends cost."""
    assert mask_secrets("\n".join(lines)) == "\n".join(mask_secrets(line) for line in lines)


@settings(max_examples=300, deadline=None)
@given(_SAFE, st.sampled_from(_NAMES), _SECRET, _SAFE, st.sampled_from(["", '"']))
def test_only_the_secret_value_changes(before: str, name: str, secret: str, after: str, quote: str) -> None:
    head = f"{before} " if before else ""
    tail = f" {after}" if after else ""
    text = f"{head}{quote}{name}={secret}{quote}{tail}"
    assert mask_secrets(text) == f"{head}{quote}{name}=***{quote}{tail}"


@settings(max_examples=400, deadline=None)
@given(_NOISY, _FLAG, _VALUE, _NOISY)
def test_a_flag_we_edit_is_never_masked(before: str, flag: str, value: str, after: str) -> None:
    sep = "" if flag.endswith("=") else " "
    text = f"{before} {flag}{sep}{value} {after}"
    assert f"{flag}{sep}{value}" in mask_secrets(text)


@settings(max_examples=400, deadline=None)
@given(_NOISY, _FLAG, _VALUE, _VALUE, _NOISY)
def test_a_changed_flag_still_differs_after_masking(before: str, flag: str, old: str, new: str, after: str) -> None:
    """The diff never hides a change: two lines that differ only in an edited flag's value differ masked."""
    sep = "" if flag.endswith("=") else " "
    line_old = f"{before} {flag}{sep}{old} {after}"
    line_new = f"{before} {flag}{sep}{new} {after}"
    assert (mask_secrets(line_old) == mask_secrets(line_new)) == (old == new)


def test_remediate_edit_shows_the_quoted_bash_c_change_with_only_the_token_masked(tmp_path: Path) -> None:
    """The printed dry-run diff of `remediate edit` (the same report `oom --dry-run` prints per host)."""
    unit = tmp_path / "sglang.service"
    script = "HF_TOKEN=hf_Quoted8 exec python3 -m sglang.launch_server --mem-fraction-static 0.94"
    unit.write_text(f'[Service]\nExecStart=/bin/bash -c "{script}"\n')
    result = CliRunner().invoke(cli, ["edit", str(unit)])
    assert result.exit_code == 0, result.output
    assert "hf_Quoted8" not in result.output
    assert '-ExecStart=/bin/bash -c "HF_TOKEN=*** exec python3 -m sglang.launch_server --mem-fraction-static 0.94"' in (
        result.stdout
    )
    assert '+ExecStart=/bin/bash -c "HF_TOKEN=*** exec python3 -m sglang.launch_server --mem-fraction-static 0.93' in (
        result.stdout
    )
