"""A strict reader of the Prometheus text exposition: every series (name and label set) once,
every family's lines together, at most one HELP and one TYPE per family. Shared by the suites
that scrape /metrics (prometheus_client is not installed here, and promtool check metrics
accepts duplicate series)."""
import re

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\["\\n])*)"(,|$)')
SUFFIXES = ("_bucket", "_sum", "_count")


def parse_strict(text):
    """{(name, labels as a sorted tuple): value}; raises AssertionError on any duplicate
    series, a family split in two, a repeated HELP/TYPE or a line that does not parse."""
    series, types, helps, done_families = {}, {}, set(), set()
    current = None

    def family(name):
        for s in SUFFIXES:
            if name.endswith(s) and types.get(name[:-len(s)]) == "histogram":
                return name[:-len(s)]
        return name

    def enter(fam):
        nonlocal current
        if fam != current:
            assert fam not in done_families, f"family {fam} is split in two groups"
            if current:
                done_families.add(current)
            current = fam

    assert text.endswith("\n")
    for line in text.splitlines():
        if not line:
            continue
        if line.startswith("# HELP ") or line.startswith("# TYPE "):
            kind, name = line.split(" ", 3)[1:3]
            enter(name)
            if kind == "TYPE":
                assert name not in types, f"TYPE {name} twice"
                types[name] = line.split(" ", 3)[3]
            else:
                assert name not in helps, f"HELP {name} twice"
                helps.add(name)
            continue
        assert not line.startswith("#"), line
        m = SAMPLE.match(line)
        assert m, f"unparsable line: {line!r}"
        name, lbl, value = m.groups()
        enter(family(name))
        labels = []
        rest = lbl or ""
        while rest:
            lm = LABEL.match(rest)
            assert lm, f"bad labels in {line!r}"
            labels.append((lm.group(1), lm.group(2)))
            rest = rest[lm.end():]
        names = [k for k, _ in labels]
        assert len(names) == len(set(names)), f"a label twice in {line!r}"
        key = (name, tuple(sorted(labels)))
        assert key not in series, f"duplicate series: {line!r}"
        float(value)
        series[key] = float(value)
    return series
