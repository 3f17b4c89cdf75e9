"""When an exchange through gpu_dlpack that did not happen is a refusal by
design, and when it is a failure.

A refusal is by design only where a rule (docs/internals/rules.md) exists
to refuse: a version below the floor or one that cannot describe the data (rule 1),
``copy=False`` where a copy is needed (rule 2), read-only data to a legacy
consumer (rule 5). Any other refusal of an exchange that works directly
(a device the layer could not reach, say) is a failure of the layer.
"""

from __future__ import annotations

from .. import _explain

#: The rules that exist to refuse, by number (docs/internals/rules.md).
RULES_THAT_REFUSE = {1: "Versions", 2: "Copy", 5: "Read-only"}
#: Every rule a refusal may name, as the rules page titles it.
RULE_NAMES = {**RULES_THAT_REFUSE, 3: "Device", 4: "Streams", 6: "Capsule kinds", 7: "bfloat16 and float8",
              8: "The capsule holds the array", 9: "Import"}


def rule_of(result) -> int | None:
    """The rule that refused ``result``, if its error is a refusal."""
    entry = _explain.by_id(result["explain"]) if result.get("explain") else None
    return entry.rule if entry is not None and entry.refusal else None


def rule_text(rule) -> str:
    return f"rule {rule} ({RULE_NAMES.get(rule, '?')})"


def judge(direct, via) -> None:
    """Make ``via`` an error when it was refused by no rule that exists to
    refuse while the direct exchange worked."""
    if via["outcome"] == "refused" and direct["ok"] and rule_of(via) not in RULES_THAT_REFUSE:
        via["outcome"] = "error"


def is_unjustified_refusal(via) -> bool:
    """An error that gpu_dlpack raised as a refusal, which ``judge`` counted
    as a failure."""
    entry = _explain.by_id(via["explain"]) if via.get("explain") else None
    return via["outcome"] == "error" and entry is not None and entry.refusal
