"""The documentation stays true to the code: every script has its page and its row in the README, every relative
link resolves, and every command in a code block parses.

Commands are parsed in-process, not by launching `--help` subprocesses (17 scripts x several commands would cost
minutes of imports): each script is imported by path (scripts import without side effects) and its flags go through
`tyro.cli(module.Args, args=flags)`; `python -m cleanrl_utils.evaluate|plot|benchmark` go through the dataclass their
own `main()` hands to `tyro.cli` (`EvalArgs`, `PlotArgs`, `BenchmarkArgs`), and a benchmark's `--command` is parsed
as a script command with the `--env-id ENV --seed SEED` the sweep runner appends.

What is parsed: lines of fenced code blocks in README.md and docs/**/*.md that run a script
(`python cleanrl/X.py ...`, `.venv/bin/python cleanrl/X.py ...`, `torchrun ... cleanrl/X.py ...`,
`python -m torch.distributed.run ... cleanrl/X.py ...`) or a utility (`python -m cleanrl_utils.X ...`), after
joining backslash continuations and dropping `# ...` comments and leading `VAR=value` assignments. Skipped: lines
that use a shell variable or substitution (`$`), whose value the docs cannot know. Placeholders such as `runs/<run>`
or `HOST:29400` stay in: they are string values, so the flags around them still parse.
"""

import glob
import importlib.util
import os
import re
import shlex
import sys

import pytest
import tyro

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.md")
DOCS = os.path.join(ROOT, "docs")
DOC_FILES = [README] + sorted(glob.glob(os.path.join(DOCS, "**", "*.md"), recursive=True))
FAMILY_PAGES = sorted(glob.glob(os.path.join(DOCS, "*.md")))  # docs/<family>.md and docs/running.md
SCRIPTS = sorted(
    os.path.basename(path)
    for path in glob.glob(os.path.join(ROOT, "cleanrl", "*.py"))
    if os.path.basename(path) != "__init__.py"
)
UTILITIES = {"evaluate": "EvalArgs", "plot": "PlotArgs", "benchmark": "BenchmarkArgs"}
FENCE = re.compile(r"^\s*```")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def rel(path: str) -> str:
    return os.path.relpath(path, ROOT)


def read(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def split_fenced(text: str) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    """(prose lines, code-block lines), each as (1-based line number, line)."""
    prose, code, inside = [], [], False
    for number, line in enumerate(text.splitlines(), start=1):
        if FENCE.match(line):
            inside = not inside
            continue
        (code if inside else prose).append((number, line))
    return prose, code


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation other than '-' and '_' dropped, spaces to '-'."""
    text = heading.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: str) -> set[str]:
    found, seen = set(), {}
    for _, line in split_fenced(read(path))[0]:
        match = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not match:
            continue
        base = slug(match.group(1))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def link_problem(source: str, target: str) -> str | None:
    """Why a relative link from `source` does not resolve, or None when it does (external links are not checked)."""
    if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
        return None
    path, _, anchor = target.partition("#")
    resolved = os.path.normpath(os.path.join(os.path.dirname(source), path)) if path else source
    if not os.path.exists(resolved):
        return f"{rel(source)}: link {target!r}: {rel(resolved)} does not exist"
    if anchor and resolved.endswith(".md") and anchor not in anchors(resolved):
        return f"{rel(source)}: link {target!r}: no heading with anchor #{anchor} in {rel(resolved)}"
    return None


# ---- every script has its page and its README row ----


def script_table_rows() -> dict[str, str]:
    """Rows of the README's script table (first cell a link to the script, `[`X.py`](cleanrl/X.py)`): script -> row.
    Other tables that name scripts (the results) are not the script table."""
    rows = {}
    for _, line in split_fenced(read(README))[0]:
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")] if line.lstrip().startswith("|") else []
        match = re.fullmatch(r"\[`([a-z0-9_]+\.py)`\]\(cleanrl/\1\)", cells[0]) if cells else None
        if match:
            rows.setdefault(match.group(1), line)
    return rows


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_script_has_a_section_on_a_docs_page(script):
    """A heading that names the script, on a page directly under docs/ (a family page)."""
    headed = [
        rel(page)
        for page in FAMILY_PAGES
        for _, line in split_fenced(read(page))[0]
        if re.match(r"^#{1,6}\s", line) and re.search(rf"(?<![\w/]){re.escape(script)}\b", line)
    ]
    assert headed, f"cleanrl/{script} has no section (a heading naming it) on any page under docs/: add one"


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_script_has_a_readme_row_linking_to_its_section(script):
    row = script_table_rows().get(script)
    assert row is not None, f"README.md's script table has no row for cleanrl/{script}"
    pages = [target for target in LINK.findall(row) if target.split("#")[0].startswith("docs/")]
    assert pages, f"README.md's row for {script} has no link to its docs page: {row}"
    for target in pages:
        assert link_problem(README, target) is None, link_problem(README, target)
        stem = script[: -len(".py")]
        assert "#" in target and slug(stem + ".py") in target.split("#")[1], (
            f"README.md's row for {script} links to {target!r}, not to the script's own section"
        )


def test_readme_table_names_only_existing_scripts():
    unknown = sorted(set(script_table_rows()) - set(SCRIPTS))
    assert not unknown, f"README.md's script table names scripts that are not in cleanrl/: {unknown}"


@pytest.mark.parametrize("page", DOC_FILES, ids=rel)
def test_relative_links_resolve(page):
    problems = [
        problem
        for _, line in split_fenced(read(page))[0]
        for target in LINK.findall(line)
        if (problem := link_problem(page, target)) is not None
    ]
    assert not problems, "\n".join(problems)


# ---- every command in a code block parses ----


def code_commands(path: str) -> list[tuple[str, str]]:
    """(id, command line) of each code-block line of `path`, continuations joined."""
    commands, pending, start = [], "", 0
    for number, line in split_fenced(read(path))[1]:
        if not pending:
            start = number
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        commands.append((f"{rel(path)}:{start}", pending + line))
        pending = ""
    return commands


def command_tokens(line: str) -> list[str] | None:
    """The command's words without comments and leading VAR=value, or None when the line cannot be judged."""
    if "$" in line:  # a shell variable or substitution: its value is unknown here
        return None
    try:
        words = shlex.split(line, comments=True)
    except ValueError:
        return None
    while words and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]):
        words = words[1:]
    return words


def is_python(word: str) -> bool:
    return re.fullmatch(r"(.*/)?python(3(\.\d+)?)?", word) is not None


def parsed_command(words: list[str]) -> tuple[str, str, list[str]] | None:
    """("script", "cleanrl/X.py", flags) or ("utility", "evaluate", flags), or None for other commands."""
    if not words:
        return None
    launcher = os.path.basename(words[0])
    runs_module = is_python(words[0]) and len(words) > 2 and words[1] == "-m"
    if runs_module and words[2].startswith("cleanrl_utils."):
        return "utility", words[2][len("cleanrl_utils.") :], words[3:]
    torchrun = launcher == "torchrun" or (runs_module and words[2] == "torch.distributed.run")
    if is_python(words[0]) or torchrun:
        for i, word in enumerate(words):
            if re.fullmatch(r"(\./)?cleanrl/[^/]+\.py", word):
                return "script", word.removeprefix("./"), words[i + 1 :]
    return None


COMMANDS = [
    (ident, line, parsed)
    for path in DOC_FILES
    for ident, line in code_commands(path)
    if (words := command_tokens(line)) is not None and (parsed := parsed_command(words)) is not None
]
_MODULES: dict[str, object] = {}


def load(path: str):
    """Import a script or utility module by path, once."""
    if path not in _MODULES:
        name = "docs_check_" + re.sub(r"\W", "_", rel(path))
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # tyro's error messages look the Args class up through its module
        spec.loader.exec_module(module)
        _MODULES[path] = module
    return _MODULES[path]


def parse_error(dataclass_type, flags: list[str], capsys) -> str | None:
    """tyro's message when `flags` do not parse into `dataclass_type`, else None."""
    try:
        tyro.cli(dataclass_type, args=flags)
    except SystemExit as exit_:
        captured = capsys.readouterr()
        return f"exit {exit_.code}: {(captured.err + captured.out).strip()[-1500:]}"
    return None


def script_problem(script: str, flags: list[str], capsys) -> str | None:
    path = os.path.join(ROOT, script)
    if not os.path.isfile(path):
        return f"{script} does not exist"
    error = parse_error(load(path).Args, flags, capsys)
    return None if error is None else f"the flags of {script} do not parse ({error})"


def test_docs_hold_commands_of_every_kind():
    """The parser below finds what it is meant to check (a regex gone wrong would check nothing)."""
    kinds = {parsed[0] for _, _, parsed in COMMANDS}
    tools = {parsed[1] for _, _, parsed in COMMANDS if parsed[0] == "utility"}
    scripts = {parsed[1] for _, _, parsed in COMMANDS if parsed[0] == "script"}
    assert kinds == {"script", "utility"} and set(UTILITIES) <= tools, (kinds, tools)
    assert {f"cleanrl/{script}" for script in SCRIPTS} <= scripts, "a script has no command in the docs"


@pytest.mark.parametrize(("ident", "line", "parsed"), COMMANDS, ids=[ident for ident, _, _ in COMMANDS])
def test_command_parses(ident, line, parsed, capsys):
    kind, target, flags = parsed
    if kind == "script":
        problem = script_problem(target, flags, capsys)
    else:
        assert target in UTILITIES, f"{ident}: no utility cleanrl_utils.{target} (known: {sorted(UTILITIES)})"
        args_type = getattr(load(os.path.join(ROOT, "cleanrl_utils", f"{target}.py")), UTILITIES[target])
        problem = parse_error(args_type, flags, capsys)
        if problem is None and target == "benchmark":  # the command each run of the sweep starts
            inner = parsed_command(command_tokens(tyro.cli(args_type, args=flags).command) or [])
            assert inner is not None and inner[0] == "script", f"{ident}: --command does not run a cleanrl/ script"
            problem = script_problem(inner[1], inner[2] + ["--env-id", "CartPole-v1", "--seed", "1"], capsys)
    assert problem is None, f"{ident}: {line.strip()}\n{problem}"


@pytest.mark.parametrize("page", DOC_FILES, ids=rel)
def test_benchmark_files_named_in_code_blocks_exist(page):
    missing = sorted(
        {
            word
            for _, line in split_fenced(read(page))[1]
            for word in re.findall(r"benchmark/[\w.]+\.(?:sh|py)", line)
            if not os.path.isfile(os.path.join(ROOT, word))
        }
    )
    assert not missing, f"{rel(page)} runs benchmark files that do not exist: {missing}"


def test_running_page_lists_every_campaign_slice():
    """Trial, Q11: docs/running.md named three of benchmark/campaign.py's five slices."""
    campaign = load(os.path.join(ROOT, "benchmark", "campaign.py"))
    text = read(os.path.join(DOCS, "running.md"))
    listed = re.findall(r"^  - `([\w-]+)`: ", text.split("benchmark/campaign.py --slice", 1)[1], re.MULTILINE)
    assert sorted(listed) == sorted(campaign.SLICES), f"running.md lists {listed}, campaign.py has {list(campaign.SLICES)}"


# make as a user starts it: under `make test` the suite inherits MAKELEVEL and MAKEFLAGS, and a nested make then
# prints "make[1]: Entering directory" around its commands
MAKE_ALONE = {key: value for key, value in os.environ.items() if key not in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS")}


def test_make_clean_keeps_the_users_runs():
    """Trial 17 cosmetic: `make clean` deleted runs/, wandb/ and videos/ (every result) with no word in the docs. It
    removes only what `make` made; `make -n` prints the commands without running them."""
    import subprocess

    result = subprocess.run(["make", "-n", "clean"], cwd=ROOT, capture_output=True, text=True, timeout=60, env=MAKE_ALONE)
    assert result.returncode == 0, result.stderr
    removed = shlex.split(result.stdout.strip().removeprefix("rm -rf "))
    assert removed == [".venv", ".pytest_cache"], result.stdout


def test_make_run_trains_pong_unless_told_another_env():
    """Trial 19 cosmetic: RUN_ARGS replaced the Makefile's `--env-id Pong-v5`, so `make run RUN_ARGS="--total-timesteps
    100000"` trained the script's default game, Breakout, while the README says Pong. `make -n` prints the command."""
    import subprocess

    def command(*run_args: str) -> list[str]:
        result = subprocess.run(["make", "-n", "run", *run_args], cwd=ROOT, capture_output=True, text=True, env=MAKE_ALONE)
        assert result.returncode == 0, result.stderr
        return shlex.split(result.stdout.strip().splitlines()[-1])[1:]

    assert command() == ["cleanrl/ppo_atari_envpool.py", "--env-id", "Pong-v5"]
    assert command("RUN_ARGS=--total-timesteps 1000") == [
        "cleanrl/ppo_atari_envpool.py",
        "--env-id",
        "Pong-v5",
        "--total-timesteps",
        "1000",
    ]
    assert command("RUN_ARGS=--env-id Breakout-v5")[-2:] == ["--env-id", "Breakout-v5"]  # the later --env-id wins


@pytest.mark.parametrize("tool", ["evaluate", "plot", "results", "benchmark"])
def test_a_tools_usage_line_is_the_command_the_docs_give(tool):
    """Trial 31: `python -m cleanrl_utils.evaluate --help` began "usage: /abs/path/cleanrl_utils/evaluate.py", a
    command that does not run (the tools are run as modules)."""
    from helpers import run_python

    result = run_python(["-m", f"cleanrl_utils.{tool}", "--help"])
    assert result.returncode == 0 and result.stdout.startswith(f"usage: python -m cleanrl_utils.{tool} "), result.stdout[:200]
    assert "{None}" not in result.stdout  # trial 32: results' --docs read "{None}|{[STR [STR ...]]}"
