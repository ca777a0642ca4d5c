"""Every reason the operator gives (conditions and Events) is documented in docs/troubleshooting.md,
and every reason the code can put on the Ready condition has a row in the guide's Ready table."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import get_args, get_type_hints

import pytest

import neuronfleet.planning
from neuronfleet.planning.reasons import Reason, Refusal

DOC = Path(__file__).resolve().parents[2] / "docs" / "troubleshooting.md"
PLANNING = Path(neuronfleet.planning.__file__).parent


def test_the_troubleshooting_guide_lists_every_reason() -> None:
    documented = set(re.findall(r"`([A-Z][A-Za-z]+)`", DOC.read_text()))
    missing = sorted(reason.value for reason in Reason if reason.value not in documented)
    assert not missing, f"docs/troubleshooting.md does not explain: {missing}"


def test_reasons_are_camel_case_words() -> None:
    for reason in Reason:
        assert re.fullmatch(r"[A-Z][A-Za-z]+", reason.value), reason


def _calls(tree: ast.AST, name: str) -> list[ast.Call]:
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == name
    ]


def _argument(call: ast.Call, index: int, keyword: str) -> ast.expr:
    if len(call.args) > index:
        return call.args[index]
    return next(k.value for k in call.keywords if k.arg == keyword)


def _member(node: ast.expr) -> Reason | None:
    """``Reason.X`` as its member; None for any other expression."""
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "Reason":
        return Reason[node.attr]
    return None


def _compile_decision_reasons() -> set[Reason]:
    """Every reason a CompileDecision is made with, in any planning module."""
    refusal_reasons = set(get_args(get_type_hints(Refusal)["reason"]))
    found: set[Reason] = set()
    for source in sorted(PLANNING.glob("*.py")):
        for call in _calls(ast.parse(source.read_text()), "CompileDecision"):
            reason = _argument(call, 3, "reason")
            member = _member(reason)
            if member is not None:
                found.add(member)
            elif ast.unparse(reason) == "refused.reason":  # a compile Job's pod the API server refuses
                found |= refusal_reasons
            else:
                raise AssertionError(f"{source.name}:{call.lineno}: teach this test the reason {ast.unparse(reason)}")
    return found


def _condition_reasons(
    condition: str, statuses: frozenset[str] = frozenset({"True", "False", "Unknown"})
) -> set[Reason]:
    """Every reason status.py can give ``condition`` with one of ``statuses``, followed through the
    reasons it takes from elsewhere (the compile decision, Available)."""
    tree = ast.parse((PLANNING / "status.py").read_text())
    found: set[Reason] = set()
    for call in _calls(tree, "ConditionValue"):
        kind = _argument(call, 0, "type")
        if not (isinstance(kind, ast.Constant) and kind.value == condition):
            continue
        status = _argument(call, 1, "status")
        if isinstance(status, ast.Constant) and status.value not in statuses:
            continue
        reason = _argument(call, 2, "reason")
        member = _member(reason)
        expression = ast.unparse(reason)
        if member is not None:
            found.add(member)
        elif (condition, expression) == ("Ready", "reason"):
            # compile_blocker's: NoInstanceTypeFits, or the compile decision's unless ArtifactReady
            # (then it blocks nothing).
            found |= {Reason.NO_INSTANCE_TYPE_FITS} | (_compile_decision_reasons() - {Reason.ARTIFACT_READY})
        elif (condition, expression) == ("Ready", "available.reason"):
            # Ready takes Available's reason while Available is not True.
            found |= _condition_reasons("Available", frozenset({"False", "Unknown"}))
        elif (condition, expression) == ("Compiled", "Reason(decision.reason)"):
            found |= _compile_decision_reasons()
        elif (condition, expression) == ("Scheduled", "refusal.reason"):
            found |= set(get_args(get_type_hints(Refusal)["reason"]))
        else:
            raise AssertionError(f"status.py:{call.lineno}: teach this test the {condition} reason {expression}")
    return found


def _table_reasons(heading: str) -> set[str]:
    """The reasons named in the first column of the guide's table under ``heading``."""
    section = DOC.read_text().split(f"\n{heading}\n", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[1] for line in section.splitlines() if line.startswith("| ")]
    return {name for cell in rows for name in re.findall(r"`([A-Z][A-Za-z]+)`", cell)}


def test_the_ready_reasons_are_followed_through_the_code() -> None:
    reasons = _condition_reasons("Ready")
    # Ready's own reasons, the compile decision's (a refused compile pod's too) and Available's.
    assert {Reason.REPLICAS_READY, Reason.INVALID_SPEC, Reason.COMPILE_FAILED, Reason.REPLICAS_NOT_READY} <= reasons
    assert {Reason.SERVICE_ACCOUNT_MISSING, Reason.CPU_LIMIT_BELOW_REQUEST, Reason.STORE_UNAVAILABLE} <= reasons
    assert Reason.ARTIFACT_READY not in reasons


# Degraded and ScalingActive take their reasons from lists and inputs this reading cannot follow;
# the test above checks that the guide names each of those somewhere.
@pytest.mark.parametrize("condition", ["Ready", "Available", "Compiled", "Scheduled", "WarmPoolReady"])
def test_each_condition_table_lists_every_reason_the_condition_can_carry(condition: str) -> None:
    missing = sorted(r.value for r in _condition_reasons(condition) if r.value not in _table_reasons(f"## {condition}"))
    assert not missing, f"the {condition} table of docs/troubleshooting.md lacks: {missing}"
