"""The CSS and JavaScript the HTML report (:mod:`.html`) inlines: plain DOM code, no library,
nothing fetched. They live as files beside this module, ``assets/report.css`` and
``assets/report.js`` (package data, so an editor and a linter read them as what they are). The
page reads its data from the ``fxflow-data`` JSON element and each view's SVG from a
``fxflow-svg-<view>`` element."""
from __future__ import annotations

from importlib.resources import files


def asset(name: str) -> str:
    """The text of ``assets/<name>``, shipped inside the package."""
    return files(__package__ or "fxflow.render").joinpath("assets", name).read_text(encoding="utf-8")


CSS = asset("report.css")
SCRIPT = asset("report.js")
