"""YAML 1.1 numbers: sexagesimal (`1:0` is 60), octal (`022` is 18), hex (`0x10` is 16),
binary and underscored forms. gpulaunch reads only plain decimals as integers: every other
form stays the string it was written as, and a field that needs a number refuses it (exit 2,
the field named). Nothing is silently converted.
"""

from __future__ import annotations

import pytest

from gpulaunch.yamlio import parse_yaml_text
from hostile.conftest import MINIMAL_CONFIG, Hostile

YAML_1_1 = ["1:0", "190:20:30", "022", "07", "0x10", "-0x1", "0o17", "0b101", "1_000", "+0x1F"]


@pytest.mark.parametrize("text", YAML_1_1)
def test_yaml_1_1_numbers_stay_strings(text: str) -> None:
    assert parse_yaml_text(f"a: {text}\nb: [{text}]\n", "t.yaml") == {"a": text, "b": [text]}


@pytest.mark.parametrize(("text", "value"), [("0", 0), ("10", 10), ("-5", -5), ("-12", -12)])
def test_plain_decimals_are_integers(text: str, value: int) -> None:
    assert parse_yaml_text(f"a: {text}\n", "t.yaml") == {"a": value}


@pytest.mark.parametrize("text", YAML_1_1)
def test_an_env_value_keeps_what_was_written(hostile: Hostile, text: str) -> None:
    hostile.write_config(MINIMAL_CONFIG + f"  env:\n    UMASK: {text}\n")
    outcome = hostile.invoke_unchanged("run", "--dry-run", "--json", "train.py")
    assert outcome.code == 0, outcome
    assert f'"UMASK": "{text}"' in outcome.stdout, outcome.stdout


@pytest.mark.parametrize(
    ("field", "line", "text"),
    [
        ("launch.nproc", "  nproc: {}\n", "022"),
        ("launch.nproc", "  nproc: {}\n", "0x2"),
        ("launch.stop_grace", "  stop_grace: {}\n", "1:0"),
        ("launch.stop_grace", "  stop_grace: {}\n", "0o17"),
        ("launch.gpus", "  gpus: {}\n", "022"),
        ("launch.gpus", "  gpus: {}\n", "0x1"),
    ],
)
def test_a_number_field_refuses_them(hostile: Hostile, field: str, line: str, text: str) -> None:
    body = MINIMAL_CONFIG.replace("  gpus: 0\n", "") if field == "launch.gpus" else MINIMAL_CONFIG
    hostile.write_config(body + line.format(text))
    outcome = hostile.invoke_unchanged("run", "--dry-run", "train.py")
    outcome.assert_clean_error(2, field)


@pytest.mark.parametrize("text", ["022", "1:0", "0x10"])
def test_set_overrides_read_them_the_same_way(hostile: Hostile, text: str) -> None:
    outcome = hostile.invoke_unchanged(
        "run", "--dry-run", "--set", f"launch.nproc={text}", "train.py"
    )
    outcome.assert_clean_error(2, "launch.nproc")
