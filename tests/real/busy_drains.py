"""What the busy-drain real tests (test_busy_drain.py, test_busy_drain_rollover.py) accept of the
drains a burst saw: one busy drain, or a chain of roll-overs (issue 25, ``drain_policy._outgrown``)
each to a drain holding MORE slots. Pure (no stack): tests/unit/test_busy_drain_rollover.py checks
that it refuses a second drain without more slots or without the roll-over's reason."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Set
from itertools import pairwise


def roll_over_problems(
    ids: Set[int], slots: Mapping[int, int], reasons_of: Mapping[int, Set[str]]
) -> list[str]:
    """Why the drains seen (ids, the most slots each held while Running, every status.drain.reason
    each showed) are not one drain or a chain of roll-overs to more slots; empty when they are."""
    order = sorted(ids)
    problems = []
    if not order or order != list(range(order[0], order[0] + len(order))):
        problems.append(f"drain ids {order}: not one drain or consecutive ones")
    for earlier, later in pairwise(order):
        if "RollingOver" not in reasons_of.get(earlier, set()):
            problems.append(
                f"drain {earlier} ended without RollingOver before drain {later}: "
                f"{sorted(reasons_of.get(earlier, set()))}"
            )
        if not slots.get(later, 0) > slots.get(earlier, 0) > 0:
            problems.append(
                f"drain {later} holds {slots.get(later, 0)} slots, drain {earlier} "
                f"{slots.get(earlier, 0)}: a roll-over must bring more"
            )
    return problems


# the events a busy drain's final part emits (handoff._deliver) and the status.drain.reason they carry
END_EVENTS = {"DrainRollingOver": "RollingOver", "DrainHandedBack": "HandingBack"}


def end_reasons(events: Iterable[tuple[str, str]]) -> dict[int, set[str]]:
    """The end reasons each drain's events show ((reason, message) of the CR's events; the message
    starts with ``drain <id>:``): the status shows a final part's reason only until the Job ends,
    a poll may miss it, the event stays."""
    out: dict[int, set[str]] = {}
    for reason, message in events:
        head = (message or "").split(":", 1)[0].split()
        if reason in END_EVENTS and len(head) == 2 and head[0] == "drain" and head[1].isdigit():
            out.setdefault(int(head[1]), set()).add(END_EVENTS[reason])
    return out
