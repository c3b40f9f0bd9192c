"""The corpus helpers themselves: a write through a planted link must show up."""

from __future__ import annotations

from hostile.conftest import Hostile, tree_state


def test_tree_state_sees_a_write_through_a_link(hostile: Hostile) -> None:
    victim = hostile.outside / "victim"
    victim.write_text("precious")
    (hostile.project / "link").symlink_to(victim)
    before = hostile.state()
    victim.write_text("overwritten")
    assert hostile.state()[1] != before[1]
    assert tree_state(hostile.project)["link"] == ("link", 0, str(victim))


def test_unknown_field_is_a_clean_error(hostile: Hostile) -> None:
    hostile.write_config("version: 1\nname: x\nimage:\n  torhc: '2.4.1'\n")
    outcome = hostile.invoke_unchanged("render")
    outcome.assert_clean_error(2, "image.torhc")
