"""PURE: the option grammars of the launchers (which options take an argument, where the command starts).

Read from each tool's own getopt table (util-linux, coreutils, sudo, conda/micromamba, uv, poetry,
pipenv); ``launchers.py`` applies them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Grammar:
    """getopt-style grammar of one launcher (``+`` mode: options end at the first non-option)."""

    short_arg: str = ""  # short options that take an argument (attached or next word)
    short_flag: str = ""  # short options without an argument
    short_optional: str = ""  # short options whose argument can only be attached (``-n65536``)
    long_arg: frozenset[str] = frozenset()  # long options that take an argument (``=`` or next word)
    long_flag: frozenset[str] = frozenset()
    long_optional: frozenset[str] = frozenset()  # argument only with ``=``
    positionals: int = 0  # words between the options and the command (taskset's mask, timeout's duration)
    subcommand: str | None = None  # ``run`` for conda, uv, poetry, pipenv
    pre_short_arg: str = ""  # options before the subcommand (``poetry -C DIR run``)
    pre_long_arg: frozenset[str] = frozenset()
    pre_flags: frozenset[str] = frozenset()
    refuse: frozenset[str] = frozenset()  # options that mean "no command" (``taskset -p PID``)
    numeric_short: bool = False  # ``nice -5``


def _set(words: str) -> frozenset[str]:
    return frozenset(words.split())


_CONDA = Grammar(
    short_arg="np",
    short_flag="vq",
    long_arg=_set("--name --prefix --cwd"),
    long_flag=_set("--no-capture-output --live-stream --verbose --quiet --debug-wrapper-scripts --dev"),
    subcommand="run",
    pre_flags=_set("-v -q --verbose --quiet --no-plugins"),
)
_MAMBA = Grammar(
    short_arg="npre",
    short_flag="dvq",
    long_arg=_set("--name --prefix --root-prefix --cwd --env --label --attach --rc-file"),
    long_flag=_set("--detach --clean-env --verbose --quiet --no-rc --no-env --live-stream --no-capture-output"),
    subcommand="run",
    pre_short_arg="r",
    pre_long_arg=_set("--root-prefix --rc-file"),
    pre_flags=_set("-v -q --verbose --quiet --no-rc --no-env"),
)

GRAMMARS: dict[str, Grammar] = {
    "numactl": Grammar(
        short_arg="iNmpCPwSfLoMI",
        short_flag="labstTuHdD",
        long_arg=_set(
            "--interleave --cpunodebind --membind --preferred --preferred-many --physcpubind "
            "--weighted-interleave --shm --file --length --offset --shmmode --shmid"
        ),
        long_flag=_set("--localalloc --all --balancing --strict --touch --huge --show --hardware --dump --dump-nodes"),
        refuse=_set("-s --show -H --hardware"),
    ),
    "taskset": Grammar(
        short_flag="ac",
        long_flag=_set("--all-tasks --cpu-list"),
        positionals=1,
        refuse=_set("-p --pid"),
    ),
    "nice": Grammar(short_arg="n", long_arg=_set("--adjustment"), numeric_short=True),
    "ionice": Grammar(
        short_arg="cn",
        short_flag="t",
        long_arg=_set("--class --classdata"),
        long_flag=_set("--ignore"),
        refuse=_set("-p --pid -P --pgid -u --uid"),
    ),  # fmt: skip
    "chrt": Grammar(
        short_arg="TPD",
        short_flag="bdfiormRav",
        long_arg=_set("--sched-runtime --sched-period --sched-deadline"),
        long_flag=_set("--batch --deadline --fifo --idle --other --rr --reset-on-fork --all-tasks --max --verbose"),
        positionals=1,
        refuse=_set("-p --pid -m --max"),
    ),
    "stdbuf": Grammar(short_arg="ioe", long_arg=_set("--input --output --error")),
    "timeout": Grammar(
        short_arg="ks",
        short_flag="v",
        long_arg=_set("--kill-after --signal"),
        long_flag=_set("--preserve-status --foreground --verbose"),
        positionals=1,
    ),
    "setpriv": Grammar(
        long_arg=_set(
            "--reuid --regid --groups --inh-caps --ambient-caps --bounding-set --securebits --pdeathsig "
            "--selinux-label --apparmor-profile --landlock-access --landlock-rule --ptracer --ruid --euid --rgid --egid"
        ),
        long_flag=_set("--clear-groups --keep-groups --init-groups --no-new-privs --reset-env --nnp"),
        refuse=_set("-d --dump"),
    ),
    "prlimit": Grammar(
        short_optional="ctdfxlqenumrysiv",
        short_arg="o",
        long_optional=_set(
            "--as --core --cpu --data --fsize --locks --memlock --msgqueue --nice --nofile --nproc --rss "
            "--rtprio --rttime --sigpending --stack"
        ),
        long_arg=_set("--output"),
        long_flag=_set("--noheadings --raw --verbose"),
        refuse=_set("-p --pid"),
    ),
    "nohup": Grammar(),
    "setsid": Grammar(short_flag="cfw", long_flag=_set("--ctty --fork --wait")),
    "conda": _CONDA,
    "mamba": _CONDA,
    "micromamba": _MAMBA,
    "uv": Grammar(
        short_arg="pPCif",
        short_flag="msqvn",
        long_arg=_set(
            "--with --with-editable --with-requirements --python --package --extra --group --no-group "
            "--only-group --env-file --directory --project --index --default-index --index-url --extra-index-url "
            "--find-links --resolution --prerelease --config-file --cache-dir --color --index-strategy "
            "--keyring-provider --exclude-newer --link-mode --refresh-package --reinstall-package "
            "--no-build-package --no-binary-package --upgrade-package --config-setting --python-platform"
        ),
        long_flag=_set(
            "--no-project --isolated --frozen --locked --no-sync --all-extras --no-dev --dev --all-packages "
            "--module --script --gui-script --active --no-active --quiet --verbose --offline --no-cache "
            "--native-tls --no-env-file --exact --no-editable --no-config --no-progress --upgrade --reinstall "
            "--refresh --no-build --no-binary --no-build-isolation --compile-bytecode --no-sources --only-dev "
            "--no-default-groups --all-groups --managed-python --no-managed-python --no-python-downloads --preview"
        ),
        subcommand="run",
        pre_short_arg="",
        pre_long_arg=_set("--directory --project --cache-dir --color --config-file"),
        pre_flags=_set("-q -v -n --quiet --verbose --offline --no-cache --native-tls --no-config --preview"),
    ),
    "poetry": Grammar(
        subcommand="run",
        pre_short_arg="PC",
        pre_long_arg=_set("--project --directory"),
        pre_flags=_set("-q -v -vv -vvv -n --quiet --verbose --no-interaction --ansi --no-ansi --no-plugins --no-cache"),
    ),
    "pipenv": Grammar(
        subcommand="run",
        pre_long_arg=_set("--python"),
        pre_flags=_set("-q -v --quiet --verbose --site-packages --clear"),
    ),
}
_SUDO = Grammar(
    short_arg="ugCDhprtTU",
    short_flag="AbEHkKnPSv",
    long_arg=_set(
        "--user --group --close-from --chdir --host --prompt --chroot --role --type --command-timeout --other-user"
    ),
    long_flag=_set(
        "--askpass --background --preserve-env --set-home --reset-timestamp --remove-timestamp --non-interactive "
        "--preserve-groups --stdin"
    ),
    long_optional=_set("--preserve-env"),
    refuse=_set("-e --edit -l --list -V --version -v --validate -i --login -s --shell"),
)
_SU = Grammar(
    short_arg="cgGsw",
    short_flag="flmpP",
    long_arg=_set("--command --session-command --group --supp-group --shell --whitelist-environment --user"),
    long_flag=_set("--fast --login --preserve-environment --pty"),
)
GRAMMARS["sudo"] = _SUDO
GRAMMARS["su"] = _SU
GRAMMARS["runuser"] = Grammar(
    short_arg=_SU.short_arg + "u", short_flag=_SU.short_flag, long_arg=_SU.long_arg, long_flag=_SU.long_flag
)
