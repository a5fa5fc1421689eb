#!/usr/bin/env python3
"""The layout check (curl's checksrc in spirit): the rules docs/architecture.md states about
the source tree, checked on every test run instead of remembered.

1. Includes point one way: each folder of src/ (one library each) and tools/ may include only
   the headers of the libraries listed for it in ALLOWED.
2. A private header (one in a library's `internal/` folder, or named `*_internal.h`, `*_int.h`)
   is included only from its own library (and from the tests, which test internals on
   purpose). src/CMakeLists.txt gives an `internal/` folder only as a PRIVATE include
   directory, so the compiler refuses such an include too; this rule also checks that.
3. ONNX Runtime (its headers, `Ort*` types) appears only in engine/, llm/, worker/ (and the
   benchmarks that measure it): not in tok/, which the LLM side shares without ORT.
4. A function that is not `static` has a caller outside its own file (tests count), or it is
   listed in scripts/layout_allow.txt as public API with the reason.

Prints one line per finding (`file:line: rule: what`) and exits 1 when there is any.
scripts/layout_known.txt lists findings being worked off (by "file: rule: name", no line
numbers): those are printed as known and do not fail, and an entry that no longer occurs
fails, so the list only shrinks.
  scripts/check_layout.py [ROOT]
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parents[1])

# folder -> the library folders its files may include (its own is always allowed)
ALLOWED = {
    "src/common": set(),
    "src/net": {"src/common"},
    "src/kserve": {"src/common"},
    "src/policy": {"src/common"},
    "src/jinja": {"src/common"},
    "src/grammar": {"src/common"},
    "src/quant": {"src/common"},
    "src/tok": {"src/common", "src/jinja"},
    "src/engine": {"src/common", "src/kserve"},
    "src/llm": {"src/common", "src/engine", "src/kserve", "src/grammar", "src/quant"},  # quant_trunk: the prefill trunk
    "src/worker": {"src/common", "src/net", "src/kserve", "src/policy", "src/engine", "src/llm", "src/tok",
                   "src/jinja", "src/quant"},
    "src/router": {"src/common", "src/net", "src/kserve", "src/policy"},
    "tools/tierbench": {"src/common", "src/net", "src/kserve", "src/policy"},
}
ORT_FOLDERS = ("src/engine", "src/llm", "src/worker", "bench", "tests")
PRIVATE_NAME = re.compile(r"(_internal|_int)\.h$")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
ORT_USE = re.compile(r'#\s*include\s*[<"]onnxruntime|\bOrt[A-Z]\w*\b|\bOrtApi\b')
# the start of a function definition or prototype at file scope: a type, then the name and "("
SIG = re.compile(r"^(?!static\b|typedef\b|extern\b|struct\s+\w+\s*\{|enum\b|union\b|return\b|else\b)"
                 r"[A-Za-z_][\w \t\*]*?[\s\*](\w+)\s*\(")


def lib_of(path):
    rel = path.relative_to(ROOT).as_posix()
    for folder in ALLOWED:
        if rel.startswith(folder + "/"):
            return folder
    return None


def sources():
    for top in ("src", "tools"):
        for p in sorted((ROOT / top).rglob("*")):
            if p.suffix in (".c", ".h") and "spike" not in p.parts:
                yield p


def is_private(p):
    return "internal" in p.relative_to(ROOT).parts or bool(PRIVATE_NAME.search(p.name))


def header_index():
    """header file name -> the library folders that hold one of that name, and the names
    of the private headers"""
    idx, private = {}, set()
    for p in sources():
        if p.suffix == ".h" and lib_of(p):
            idx.setdefault(p.name, set()).add(lib_of(p))
            if is_private(p):
                private.add(p.name)
    return idx, private


def check_includes(findings):
    idx, private = header_index()
    for p in sources():
        lib = lib_of(p)
        if not lib:
            continue
        for n, line in enumerate(p.read_text(errors="replace").splitlines(), 1):
            m = INCLUDE.match(line)
            if not m:
                continue
            name = pathlib.PurePosixPath(m.group(1)).name
            owners = idx.get(name, set())
            if not owners or lib in owners:
                continue  # generated, system-like, or its own library's header
            allowed = owners & ALLOWED[lib]
            where = f"{p.relative_to(ROOT)}:{n}"
            if not allowed:
                findings.append(f"{where}: dependency: {lib} includes {name} from {', '.join(sorted(owners))}")
            elif name in private:
                findings.append(f"{where}: private header: {name} belongs to {', '.join(sorted(owners))}")


def check_private_dirs(findings):
    """An internal/ folder is a PRIVATE include directory of its own library's target only."""
    cmake = ROOT / "src" / "CMakeLists.txt"
    text = cmake.read_text()
    for m in re.finditer(r"target_include_directories\(\s*(\w+)([^)]*)\)", text):
        n = text.count("\n", 0, m.start()) + 1
        scope = None
        for word in m.group(2).split():
            if word in ("PUBLIC", "INTERFACE", "PRIVATE", "SYSTEM", "BEFORE"):
                scope = word if word != "SYSTEM" and word != "BEFORE" else scope
            elif "internal" in pathlib.PurePosixPath(word).parts and scope != "PRIVATE":
                findings.append(f"src/CMakeLists.txt:{n}: private header: {word} is a {scope} include "
                                f"directory of {m.group(1)} (make it PRIVATE)")


def check_ort(findings):
    for p in sources():
        rel = p.relative_to(ROOT).as_posix()
        if rel.startswith(ORT_FOLDERS):
            continue
        for n, line in enumerate(p.read_text(errors="replace").splitlines(), 1):
            code = line.split("//")[0]
            if ORT_USE.search(code) and not code.lstrip().startswith(("*", "/*")):
                findings.append(f"{rel}:{n}: onnxruntime: ONNX Runtime outside engine/llm/worker")


def definitions(p):
    """(name, line) of every non-static function defined in a .c file"""
    lines = p.read_text(errors="replace").splitlines()
    for i, line in enumerate(lines):
        m = SIG.match(line)
        if not m:
            continue
        # the parameters close within a few lines; a body, not a ';', must follow
        text = " ".join(lines[i:i + 6])
        depth, j = 0, text.index("(", m.start(1))
        for j in range(j, len(text)):
            depth += {"(": 1, ")": -1}.get(text[j], 0)
            if depth == 0:
                break
        if text[j + 1:].lstrip().startswith("{"):
            yield m.group(1), i + 1


def callers_in_header(text, word):
    """Uses of a name in a header that are calls: in a macro or an inline body (indented, or
    after the "{" of a one-line inline function), not the prototype that declares it (which
    starts at column 0)."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if not word.search(line):
            continue
        if "{" in line and word.search(line[line.index("{"):]):
            return True
        if line.lstrip().startswith("#define") or (i and lines[i - 1].rstrip().endswith("\\")):
            return True
        if line[:1] in (" ", "\t") and not line.lstrip().startswith(("*", "/*")):
            prev = lines[i - 1].rstrip() if i else ""
            if not prev.endswith((",", "(")):  # a wrapped prototype's continuation
                return True
    return False


def check_exports(findings):
    allow = set()
    allow_file = ROOT / "scripts" / "layout_allow.txt"
    if allow_file.exists():
        for line in allow_file.read_text().splitlines():
            line = line.split("#")[0].strip()
            if line:
                allow.add(line.split()[0])
    texts, headers = {}, {}
    for top in ("src", "tools", "tests", "bench"):
        for p in (ROOT / top).rglob("*.c"):
            texts[p] = p.read_text(errors="replace")
        for p in (ROOT / top).rglob("*.h"):
            headers[p] = p.read_text(errors="replace")
    for p in sorted(texts):
        if not p.relative_to(ROOT).as_posix().startswith(("src/", "tools/")) or "spike" in p.parts:
            continue
        for name, n in definitions(p):
            if name in allow or name == "main":
                continue
            word = re.compile(r"\b" + re.escape(name) + r"\b")
            if not any(q != p and word.search(t) for q, t in texts.items()) and \
                    not any(callers_in_header(t, word) for t in headers.values() if word.search(t)):
                findings.append(f"{p.relative_to(ROOT)}:{n}: dead export: {name} has no caller outside its "
                                "file (make it static, delete it, or list it in scripts/layout_allow.txt)")


def key(finding):
    """a finding without its line number and advice: "file: rule: name" """
    where, rule, what = finding.split(": ", 2)
    return f"{where.rsplit(':', 1)[0]}: {rule}: {what.split()[0]}"


def main():
    findings = []
    check_includes(findings)
    check_private_dirs(findings)
    check_ort(findings)
    check_exports(findings)
    known_file = ROOT / "scripts" / "layout_known.txt"
    known = set()
    if known_file.exists():
        known = {l.split("#")[0].strip() for l in known_file.read_text().splitlines()} - {""}
    new = [f for f in findings if key(f) not in known]
    gone = sorted(known - {key(f) for f in findings})
    for f in findings:
        print(("known: " if key(f) in known else "") + f)
    for g in gone:
        print(f"{g}: fixed: remove it from scripts/layout_known.txt")
    print(f"layout check: {len(new)} new finding(s), {len(findings) - len(new)} known, {len(gone)} fixed and still listed")
    return 1 if new or gone else 0


if __name__ == "__main__":
    sys.exit(main())
