"""Presenters: turn a :class:`~fxflow.report.Report` into text for people (a plain table, a rich
terminal table). The diagram lives next door in :mod:`fxflow.render`. Presenters read the
Report and nothing else; the Report never imports them except through its notebook/convenience
delegations (``Report.table``, ``Report.render``, ``_repr_svg_``)."""
