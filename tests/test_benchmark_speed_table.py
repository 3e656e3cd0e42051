"""benchmark/speed_by_machine.py's table: a new measurement replaces the row of the same CPU, ISA and script, and
keeps every other machine's rows and the text around the table."""

import importlib.util
import os

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_benchmark():
    spec = importlib.util.spec_from_file_location("speed_by_machine", os.path.join(REPO, "benchmark", "speed_by_machine.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def row(date: str, cpu: str, isa: str, script: str, ratio: str) -> str:
    return f"| {date} | {cpu} | {isa} | `{script}` (precision: fp32) | ref | 1 / 1 | 1 / 2 | {ratio} | not run | |"


def key(line: str) -> tuple[str, ...]:
    return load_benchmark().row_key(line)


def test_rows_of_other_machines_survive_and_the_same_machine_is_replaced(tmp_path, monkeypatch):
    bench = load_benchmark()
    table = tmp_path / "speed.md"
    old_zen3 = row("2026-11-01", "EPYC Zen 3 (2)", "AVX2", "ppo_atari_envpool", "1.20x")
    old_here = row("2026-11-01", "AMD EPYC (2)", "AVX-512-BF16", "ppo_atari_envpool", "1.40x")
    table.write_text("# intro\n\n" + bench.HEADER + "\n|---|\n" + old_zen3 + "\n" + old_here + "\n\n## after\ntext\n")
    monkeypatch.setattr(bench, "TABLE", str(table))

    new_here = row("2026-11-25", "AMD EPYC (2)", "AVX-512-BF16", "ppo_atari_envpool", "1.59x").replace("fp32", "bf16")
    new_dqn = row("2026-11-25", "AMD EPYC (2)", "AVX-512-BF16", "dqn_atari_envpool", "1.77x")
    bench.write_rows({key(new_here): new_here, key(new_dqn): new_dqn})

    lines = table.read_text().splitlines()
    body = [line for line in lines if line.startswith("| 2026")]
    assert old_zen3 in body and new_here in body and new_dqn in body and old_here not in body
    assert len(body) == 3
    assert lines[0] == "# intro" and lines[-2:] == ["## after", "text"]


def test_a_missing_table_is_created_with_its_header(tmp_path, monkeypatch):
    bench = load_benchmark()
    monkeypatch.setattr(bench, "TABLE", str(tmp_path / "docs" / "speed.md"))
    line = row("2026-11-25", "AMD EPYC (2)", "AVX2", "sac_continuous_action_envpool", "2.00x")
    bench.write_rows({key(line): line})
    lines = (tmp_path / "docs" / "speed.md").read_text().splitlines()
    assert bench.HEADER in lines and lines[-1] == line
