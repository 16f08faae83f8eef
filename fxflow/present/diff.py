"""``fxflow diff OLD NEW``: what a change did to gradient flow.

OLD and NEW are each a JSON report (``fxflow check --json`` output) or a target that is checked
now. The answer: parameters whose verdicts changed, parameters added or removed, and cut sites
that appeared or disappeared. A cut site is identified by its op, its file and its node name, not
its line, so code that merely moved is not reported. Exit 1 when NEW has a problem that OLD did
not (a parameter that stopped learning, or a new one that does not learn); 0 otherwise.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Callable

from .baseline import read_json
from ..errors import FxflowError
from .findings import split_source
from ..report import ParameterReport, Report
from ..verdicts import CutSite


def load_report(spec: str, check_target: Callable[[str], Report]) -> Report:
    """A JSON report file, or a target to check now (with ``check_target``)."""
    if spec.endswith(".json") or (os.path.isfile(spec) and not spec.endswith(".py")):
        data = read_json(spec, "report")
        try:
            return Report.from_dict(data if isinstance(data, dict) else {})
        except FxflowError as error:
            raise FxflowError(f"{spec}: {error.message}") from error
    return check_target(spec)


@dataclass
class VerdictChange:
    name: str
    old: ParameterReport | None  # None: the parameter is new
    new: ParameterReport | None  # None: the parameter is gone

    @property
    def worse(self) -> bool:
        """NEW has a problem here that OLD did not."""
        return self.new is not None and self.new.problem and (self.old is None or not self.old.problem)


@dataclass
class Diff:
    old: Report
    new: Report
    changes: list[VerdictChange] = field(default_factory=list)
    sites_gone: list[CutSite] = field(default_factory=list)
    sites_new: list[CutSite] = field(default_factory=list)
    raises_new: list[CutSite] = field(default_factory=list)  # where NEW's loss.backward() raises and OLD's did not

    @property
    def worse(self) -> bool:
        return any(change.worse for change in self.changes) or bool(self.raises_new)

    def to_dict(self) -> dict[str, Any]:
        return {
            "old": self.old.target, "new": self.new.target,
            "changes": [{"parameter": c.name, "old": _state(c.old), "new": _state(c.new), "worse": c.worse}
                        for c in self.changes],
            "cut_sites_gone": [_site_dict(s) for s in self.sites_gone],
            "cut_sites_new": [_site_dict(s) for s in self.sites_new],
            "backward_raises_new": [_site_dict(s) for s in self.raises_new],
            "worse": self.worse,
        }


def _state(parameter: ParameterReport | None) -> str | None:
    if parameter is None:
        return None
    return parameter.static + (f"/{parameter.dynamic}" if parameter.dynamic else "") + (" (allowed)" if parameter.allowed else "")


def _site_dict(site: CutSite) -> dict[str, Any]:
    return {"op": site.op, "source": site.source, "node": site.node}


def _site_key(site: CutSite) -> tuple[str, str | None, str]:
    return site.op, split_source(site.source)[0], site.node


def diff_reports(old: Report, new: Report) -> Diff:
    """Compare two reports parameter by parameter and cut site by cut site."""
    result = Diff(old, new)
    old_by_name = {p.name: p for p in old.parameters}
    new_by_name = {p.name: p for p in new.parameters}
    for name in list(old_by_name) + [n for n in new_by_name if n not in old_by_name]:
        before, after = old_by_name.get(name), new_by_name.get(name)
        if before is None or after is None or _state(before) != _state(after) or before.problem != after.problem:
            result.changes.append(VerdictChange(name, before, after))
    old_sites = {_site_key(s): s for s in old.cuts}
    new_sites = {_site_key(s): s for s in new.cuts}
    result.sites_gone = [s for key, s in old_sites.items() if key not in new_sites]
    result.sites_new = [s for key, s in new_sites.items() if key not in old_sites]
    raised_before = {_site_key(s) for s in old.backward_raises}
    result.raises_new = [s for s in new.backward_raises if _site_key(s) not in raised_before]
    return result


def render_diff(diff: Diff) -> str:
    """The text ``fxflow diff`` prints."""
    lines = [f"fxflow diff {diff.old.target} -> {diff.new.target}", ""]
    if diff.changes:
        rows = [("parameter", "old", "new", "")] + [
            (c.name, _state(c.old) or "(absent)", _state(c.new) or "(absent)", _direction(c)) for c in diff.changes]
        widths = [max(len(row[i]) for row in rows) for i in range(3)]
        lines.extend("  ".join([row[0].ljust(widths[0]), row[1].ljust(widths[1]), row[2].ljust(widths[2]), row[3]]).rstrip()
                     for row in rows)
    else:
        lines.append("no parameter changed its verdict")
    sited = (("cut site gone", diff.sites_gone), ("new cut site", diff.sites_new),
             ("loss.backward() raises (new)", diff.raises_new))
    listed = sum(len(sites) for _, sites in sited)
    for label, sites in sited:
        for site in sites:
            lines.append(f"{label}: {site.op} @ {site.source or site.node}")
    if listed:
        lines.insert(len(lines) - listed, "")
    lines.extend(["", _summary(diff)])
    return "\n".join(lines)


def _direction(change: VerdictChange) -> str:
    if change.worse:
        return "stopped learning" if change.old is not None else "new, does not learn"
    if change.old is not None and change.old.problem and (change.new is None or not change.new.problem):
        return "learns now" if change.new is not None else "removed"
    return ""


def _summary(diff: Diff) -> str:
    worse = sum(1 for c in diff.changes if c.worse)
    better = sum(1 for c in diff.changes if c.old is not None and c.old.problem and (c.new is None or not c.new.problem))
    head = "worse" if diff.worse else "not worse"
    raises = f"; loss.backward() raises at {len(diff.raises_new)} new op{'s' if len(diff.raises_new) != 1 else ''}" \
        if diff.raises_new else ""
    return (f"{head}: {worse} parameter{'s' if worse != 1 else ''} stopped learning, {better} learn now; "
            f"{len(diff.sites_new)} cut site{'s' if len(diff.sites_new) != 1 else ''} new, {len(diff.sites_gone)} gone"
            + raises)
