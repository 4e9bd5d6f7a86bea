"""The gate's JUnit XML report: one testcase per check, for the CI systems that read JUnit
(GitHub Actions test reporters, GitLab, Jenkins).

Layout (valid against schemas/junit.xsd, the Jenkins JUnit format):

- one ``<testsuite>`` per scenario, named ``otel-assay.<scenario>``; its ``<properties>``
  carry the statistics, named ``<check>.<statistic>`` (the Jenkins schema allows
  properties on suites only, so that is where they go);
- one ``<testcase>`` per check: FAIL is a ``<failure>``, INCONCLUSIVE (and a check that
  did not run) is ``<skipped>`` with the reason, PASS has no child; ``<system-out>`` holds
  the reason and the statistics as text;
- a last suite ``otel-assay`` with the coverage and the decision (block = failure of type
  ``FAIL``, manual = failure of type ``MANUAL``: the exit code is 2 and the job fails, so a
  check-run built from this file must not show green); without a scenario suffix, so that
  no scenario's suite (a scenario may well be called "gate") takes its name.

Jenkins reads a classname as ``package.Class`` and splits it at the last dot: in the
classname, a dot inside a scenario's name is written as "․" (one dot leader, which
looks the same), so ``refund.v2`` stays one class. Suite names and properties keep the name
as it is.
"""

from __future__ import annotations

import json
import re
import socket
import xml.etree.ElementTree as ET
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

# characters XML 1.0 does not allow (ElementTree writes them as they are and the file no
# longer parses), and C1 controls; a scenario or tool name is span data and can hold any
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff\ufffe\uffff]")


GATE_SUITE = "otel-assay"
CLASSNAME_DOT = "\u2024"


def _xml_text(s: str) -> str:
    return _NOT_XML.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100
                        else f"\\u{ord(m.group()):04x}", s)


def _make_xml_safe(root: ET.Element) -> None:
    for el in root.iter():
        if el.text:
            el.text = _xml_text(el.text)
        for k, v in el.attrib.items():
            el.attrib[k] = _xml_text(v)


def _value(v: Any) -> str:
    if isinstance(v, float):
        return repr(v) if v == v and v not in (float("inf"), float("-inf")) else "nan"
    if isinstance(v, (list, dict)):
        return json.dumps(v, separators=(",", ":"), default=str)
    return "" if v is None else str(v)


def _case(suite: ET.Element, classname: str, name: str, verdict: str, reason: str, gating: bool,
          stats: dict[str, Any], *, fails: bool = False) -> None:
    """One testcase; ``fails`` makes a verdict other than FAIL a failure too (the decision)."""
    case = ET.SubElement(suite, "testcase", name=name, classname=classname, time="0")
    label = verdict if gating else f"{verdict} (reported only, not part of the decision)"
    if (verdict == "FAIL" or fails) and gating:
        ET.SubElement(case, "failure", message=reason, type=verdict).text = f"{name}: {verdict}\n{reason}"
    elif verdict != "PASS":
        ET.SubElement(case, "skipped", message=f"{label}: {reason}")
    lines = [f"{label}: {reason}"] + [f"{k} = {_value(v)}" for k, v in stats.items()]
    ET.SubElement(case, "system-out").text = "\n".join(lines)


def _counts(suite: ET.Element) -> None:
    cases = suite.findall("testcase")
    suite.set("tests", str(len(cases)))
    suite.set("failures", str(sum(1 for c in cases if c.find("failure") is not None)))
    suite.set("errors", "0")
    suite.set("skipped", str(sum(1 for c in cases if c.find("skipped") is not None)))
    suite.set("time", "0")


def junit_tree(result) -> ET.ElementTree:
    root = ET.Element("testsuites", name=f"otel-assay {result.mode}")
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
    host = socket.gethostname() or "localhost"
    suites = []
    for i, r in enumerate(result.scenarios):
        classname = f"otel-assay.{r.scenario.replace('.', CLASSNAME_DOT)}"
        suite = ET.SubElement(root, "testsuite", name=f"otel-assay.{r.scenario}", timestamp=stamp, hostname=host, id=str(i),
                              package="otel-assay")
        props = ET.SubElement(suite, "properties")
        for arm_name, arm in (("baseline", r.baseline), ("candidate", r.candidate)):
            if arm is None:
                continue
            for k in ("trials", "with_outcome", "passes"):
                ET.SubElement(props, "property", name=f"{arm_name}.{k}", value=_value(getattr(arm, k)))
            ET.SubElement(props, "property", name=f"{arm_name}.pass_rate", value=_value(arm.rate))
        for c in r.checks:
            ET.SubElement(props, "property", name=f"{c.name}.verdict", value=c.verdict)
            for k, v in c.stats.items():
                ET.SubElement(props, "property", name=f"{c.name}.{k}", value=_value(v))
        for c in r.checks:
            _case(suite, classname, c.name, c.verdict, c.reason, c.gating, c.stats)
        suites.append(suite)

    suite = ET.SubElement(root, "testsuite", name=GATE_SUITE, timestamp=stamp, hostname=host,
                          id=str(len(suites)), package="otel-assay")
    props = ET.SubElement(suite, "properties")
    for k, v in (("decision", result.decision), ("exit_code", result.exit_code),
                 ("alpha", result.config.alpha), ("delta", result.config.delta), ("beta", result.config.beta),
                 ("threshold", result.config.threshold), ("correction", result.config.correction),
                 # the one family the correction ran over (each <check>.pvalue_adjusted is within it)
                 ("family.size", (result.family or {}).get("size")),
                 ("family.tests", (result.family or {}).get("tests")),
                 ("candidate", result.candidate["selection"]),
                 ("baseline", result.baseline["selection"] if result.baseline else None),
                 # the instrumentations that recorded each arm's steps
                 ("candidate.conventions", ",".join(result.candidate.get("conventions", []))),
                 ("baseline.conventions", ",".join(result.baseline.get("conventions", [])) if result.baseline
                  else None)):
        ET.SubElement(props, "property", name=k, value=_value(v))
    cov = result.coverage
    if cov:
        for d in cov["dimensions"]:
            ET.SubElement(props, "property", name=f"coverage.{d['name']}", value=_value(d["value"]))
        ET.SubElement(props, "property", name="coverage.overall", value=_value(cov["overall"]))
        # without a minimum, coverage is reported, not judged: a passing case that says so
        judged = cov["verdict"] != "SKIPPED"
        _case(suite, GATE_SUITE, "coverage", cov["verdict"] if judged else "PASS",
              cov["reason"], judged, {"overall": cov["overall"], "minimum": cov["minimum"]})
    verdict = {"deploy": "PASS", "block": "FAIL", "manual": "MANUAL"}[result.decision]
    _case(suite, GATE_SUITE, "decision", verdict, f"{result.decision}: " + "; ".join(result.reasons[:20]), True,
          {"exit_code": result.exit_code}, fails=result.decision != "deploy")
    suites.append(suite)
    for s in suites:
        _counts(s)
    for k in ("tests", "failures", "errors", "skipped"):
        root.set(k, str(sum(int(s.get(k)) for s in suites)))
    root.set("time", "0")
    _make_xml_safe(root)
    return ET.ElementTree(root)


def write_junit(result, path: str | Path) -> None:
    tree = junit_tree(result)
    ET.indent(tree)
    tree.write(path, encoding="utf-8", xml_declaration=True)
