"""Numbers in a lesson's prose come from its own cells or from a cited source (issue #31, item 5).

``check(path)`` reads a notebook (a path, or its JSON as a dict) and returns a ``Finding`` (cell, number, sentence,
why) for each number in its markdown that nothing below supports. The CLI prints one line per finding and exits 1
if there is any::

    .venv/bin/python tests/prose_numbers.py notebooks/07_quantization.ipynb [more notebooks ...]
    L07 c8: "1.58" — not printed by any cell (nearest printed: 1.62): <the sentence, shortened>

``c8`` is the index of the markdown cell in the notebook's cells, from 0.

Which numbers are checked (markdown cells only)
    * every number with a decimal point: ``1.58``, ``0.9``, ``2,048.5``, ``2.3e-05``;
    * every number, whole or not, with a unit: time (``ns µs us ms s min h``), size (``KB KiB MB MiB GB GiB TB``),
      bandwidth (``GB/s TB/s ...``), compute (``TFLOP/s TFLOPS TOPS``), ``tokens/s``, ``W GHz MHz``, ``%``, and a
      ratio written against its number (``2×``, ``2x``; not the shape ``8192 × 8192`` nor the product
      ``3 × hidden``).
    Plain whole numbers (``128 weights``, ``8192``) are not checked.

Skipped as not prose
    fenced and inline code, math (``$...$``, ``$$...$$``, ``\\(...\\)``), HTML tags, URLs and link targets, the
    number that opens a heading (``## 4b.``) or a list item (``1.``), dotted versions (``2.11.0``), a version after
    a product word (``torch 2.5``, ``CUDA 12.4``, ``compute capability 9.0``, ``sm_90``, ``PCIe 5.0``, ``v2.1``,
    ``Llama 3.1``; see ``_VERSION_WORDS``; but ``NVLink 900 GB/s`` is a quantity), numbers glued to letters on
    their left (``H100``, ``fp8``, ``FlashAttention-2``), dates (``2024-05-01``), arXiv ids, and references
    (``section 4.2``, ``lesson 05``, ``sections 2 and 4b``, ``step 3``, ``c12``, ``L07``, ``#31``).

A number is supported when
    1. A code cell of the notebook prints it: its value is in the text of an output (stream text, ``text/plain``,
       ``text/markdown``, ``text/html`` without its tags; images carry no text, and a plot's ``<Figure size ...>``
       is ignored). Rounding is allowed one way: the printed value rounded to the prose's last digit is the prose
       value (prose ``1.6`` or ``1.6×`` is supported by a printed ``1.58``, ``31.6 µs`` by ``31.64``, ``2×`` by
       ``1.98x``; ``1.7`` is not supported by ``1.58``, nor ``1.58`` by a printed ``1.6``). A whole number ending
       in 0 with a unit is read as a round figure: ``800 MB`` is supported by a printed value within 1% (803.9).
       Thousands separators and ``×`` against ``x`` do not matter.
       The unit must match what the output says: a prose number with a unit is supported only by a printed number
       whose surroundings name a unit of the same family (time, size, bandwidth, compute, ratio, percent, ...):
       its own line, the line before, the first line of its block of output, or the last line above it without
       digits (a table's header); where none of these names a unit, the strings of the cell's source (a plot's
       axis label, a format string). ``x``, ``×``, ``speed-up``, ``vs`` and ``a / b`` name a ratio. Within a
       family one prefix step is allowed: ``16 MB`` printed as ``16,384 KB``, ``4.3 TB/s`` as ``4,291 GB/s``,
       ``6 µs`` as ``0.006 ms``.
       A number *derived* from printed ones (a ratio of two printed times, a sum, 1 - 0.99 as "within 1%", a
       percentage printed as a fraction) is not supported: print it, or print the inputs and not the result.
    2. The notebook's code sets it: the value is a number literal in the source of one of its code cells (a Python
       number token: not in a comment, a string or a format spec such as ``:9.1f``): a block size ``128``, a
       ``0.5`` threshold, a ``256`` MB buffer, a ``2`` ms sleep. Exact value, no rounding, and only for a plain
       decimal, a size or a time: a speed-up, a percentage, a bandwidth or a rate is no setting.
    3. The sentence shows its arithmetic: the number follows ``=`` or ``≈`` after an expression of numbers and
       operators (``2⁻¹¹ ≈ 4.9e-4``), and that expression evaluates to it, rounded.
    4. The sentence cites a source. It cites when it contains
         * a URL (``https://...``, a markdown link's target too);
         * the path or file name of a file in the repository (tracked, or new and not ignored), e.g.
           ``lab/results/h100-explore-compile09.json``, ``kernels.py``, ``README.md``,
           ``10_training_scale.ipynb`` (``.json .py .md .txt .csv .ipynb .cu .cuh .yml .yaml .toml``; a name
           that matches no file does not cite);
         * a marker ``(source: ...)``, ``(sources: ...)`` or ``(cited: ...)`` naming the document, e.g.
           ``(source: NVIDIA H100 SXM datasheet)``, ``(source: PyTorch DDP docs, bucket_cap_mb)``;
         * a publication named the usual way: ``Shah et al., 2024``, ``Dao and Ré 2022``, ``(Dao, 2023)``,
           ``arXiv:2407.08608``, or a vendor's ``datasheet`` / ``whitepaper``.
       The citation must be in the number's sentence. A parenthesis after a full stop stays in the sentence
       before it, so ``... 3.35 TB/s. (source: NVIDIA H100 SXM datasheet)`` cites too. A table row, a list item
       and a heading are sentences of their own; "the same results file" does not cite, name it again.

How strict this is: values are compared, not meanings, so a wrong number can still pass when some other printed
value of the same family happens to round to it (for the lessons' decimals, about one wrong value in five; for small
whole numbers with a unit, more). What fails is a number that nothing printed, set or cited can account for.
"""
from __future__ import annotations

import argparse
import ast
import bisect
import html
import io
import json
import re
import subprocess
import sys
import tokenize
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Finding:
    cell: int  # index of the markdown cell in the notebook's cells, from 0
    number: str  # as written in the prose, unit included ("31.6 µs", "2×")
    sentence: str  # the sentence it sits in, whitespace collapsed
    why: str

    def line(self, label: str = "") -> str:
        where = f"{label} c{self.cell}" if label else f"c{self.cell}"
        return f'{where}: "{self.number}" — {self.why}: {shorten(self.sentence, self.number)}'


# --- numbers --------------------------------------------------------------------------------------------------------

_NUM = r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|\.\d+"
_UNITS = (
    r"TFLOP/s|GFLOP/s|PFLOP/s|FLOP/s|TFLOPS|GFLOPS|PFLOPS|TOPS|tokens/s|tok/s|"
    r"TB/s|GB/s|MB/s|KB/s|TiB/s|GiB/s|MiB/s|"
    r"KiB|MiB|GiB|TiB|KB|kB|MB|GB|TB|"
    r"ns|µs|μs|us|ms|s|sec|seconds?|minutes?|min|hours?|h|"
    r"W|GHz|MHz"
)
# A number, then optionally (a space and) a unit; × or x right after it is a ratio unless another number follows (a
# shape, 8192×8192). A number glued to letters on its left (sm90, fp8, x2, e4m3, H100, 3.1.2, Llama-3) is not a
# quantity; a hyphen after a number (a range, 1.5-2×) does not hide the next one.
_QUANTITY = re.compile(
    rf"(?<![\w.,/])(?<![A-Za-z]-)(?P<num>{_NUM})"
    rf"(?:(?P<ratio>×(?!\s*\d)|x(?![\w\d])(?!\s*\d))|(?P<pct>\s?%)|\s?(?P<unit>{_UNITS})(?![\w/]))?"
)
_PRINTED = re.compile(rf"(?<![\d.])(?:{_NUM})")


def _value(text: str) -> Decimal | None:
    try:
        return Decimal(text.replace(",", ""))
    except InvalidOperation:
        return None


# --- masking what is not prose ----------------------------------------------------------------------------------------

_VERSION_WORDS = (
    "torch", "pytorch", "triton", "cuda", "python", "nccl", "cudnn", "cublas", "cublaslt", "cutlass", "nvcc", "gcc",
    "clang", "numpy", "jax", "jupyter", "jupyterlab", "ubuntu", "driver", "drivers", "version", "versions",
    "release", "capability", "capabilities", "sm", "sm_", "pcie", "nvlink", "v", "llama", "llama-", "gpt",
    "gpt-", "ptx", "isa", "python3", "cu", "flashattention", "flashattention-", "torchao", "nbformat",
)
_REF_WORDS = r"sections?|§|lessons?|issues?|cells?|steps?|parts?|chapters?|exercises?|figures?|fig\.|tables?|items?"

_MASKS = [
    re.compile(r"^(?P<f>`{3,}|~{3,}).*?^(?P=f)[^\n]*$", re.S | re.M),  # fenced code
    re.compile(r"(`+).+?\1", re.S),  # inline code
    re.compile(r"\$\$.+?\$\$", re.S),  # display math
    re.compile(r"(?<![\\\w])\$(?!\s)[^$\n]+?(?<!\s)\$"),  # inline math
    re.compile(r"\\\(.+?\\\)|\\\[.+?\\\]", re.S),
    re.compile(r"<!--.*?-->", re.S),
    re.compile(r"</?[A-Za-z][^>\n]*>"),  # HTML tags and autolinks
    re.compile(r"https?://[^\s)>\]]+"),
    re.compile(r"\]\([^)\s]*(?:\s+\"[^\"]*\")?\)"),  # link and image targets
    re.compile(r"^\s{0,3}#{1,6}\s+\d+(?:\.\d+)*[a-z]?\.?", re.M),  # the number opening a heading
    re.compile(r"^\s*\d+[.)](?=\s)", re.M),  # list numbering
    re.compile(r"\b\d+(?:\.\d+){2,}\S*"),  # dotted versions 2.11.0, 3.6.0+cu130
    re.compile(r"\b\d{4}-\d{2}(?:-\d{2})?\b"),  # dates
    re.compile(r"(?i)\barXiv:\s?\d{4}\.\d{4,5}(?:v\d+)?"),
    re.compile(
        rf"(?i)(?<![\w-])(?:{'|'.join(re.escape(w) for w in sorted(_VERSION_WORDS, key=len, reverse=True))})"
        rf"[\s_]*(?>\d+(?:\.\d+)*)(?!\s?(?:{_UNITS}|×|%)(?![\w/]))(?:\.x)?\+?"  # not "NVLink 900 GB/s"
    ),
    re.compile(
        rf"(?i)(?<!\w)(?:{_REF_WORDS})\s*#?\d+(?:\.\d+)?[a-z]?\b"
        r"(?:(?:\s*,\s*|\s*[–-]\s*|\s+(?:and|or|to)\s+)#?\d+(?:\.\d+)?[a-z]?\b)*"
    ),
    re.compile(r"(?<![\w#])(?:[Lc]\d+|#\d+)\b"),  # c12, L07, #31
]


def _masked(text: str) -> str:
    """``text`` with everything that is not prose replaced by spaces (offsets kept)."""
    chars = list(text)
    for rx in _MASKS:
        for m in rx.finditer("".join(chars)):
            for i in range(m.start(), m.end()):
                if chars[i] != "\n":
                    chars[i] = " "
    return "".join(chars)


# --- sentences ------------------------------------------------------------------------------------------------------

_ABBREV = re.compile(r"(?i)(?:\be\.g|\bi\.e|\bvs|\bcf|\bet al|\betc|\bapprox|\bfig|\bno|\bresp|\bca|\bDr|\bSec)\.$")
_BREAK = re.compile(
    r"\n\s*\n"  # paragraph
    r"|\n(?=\s*(?:[-*+]\s|\d+[.)]\s|#|\|))"  # list item, heading, table row
    r"|(?<=[|])\s*\n"  # the end of a table row
    r"|(?<=[.!?])[\"')\]*_]*\s+(?=[A-Z\"“*_`\[])"  # a full stop, then a capital (not a parenthesis)
)


def _sentences(text: str) -> list[tuple[int, int]]:
    """(start, end) of each sentence of a markdown cell (fenced code counts as one break)."""
    spans, start = [], 0
    code = [(m.start(), m.end()) for m in _MASKS[0].finditer(text)] + [
        (m.start(), m.end()) for m in _MASKS[1].finditer(text)
    ]
    for m in _BREAK.finditer(text):
        if any(a <= m.start() < b for a, b in code):  # a full stop inside inline code or a block does not end
            continue
        if _ABBREV.search(text[max(0, m.start() - 8):m.start()].rstrip("\"')]*_")):
            continue
        spans.append((start, m.start()))
        start = m.end()
    spans.append((start, len(text)))
    return [(a, b) for a, b in spans if text[a:b].strip()]


# --- citations ------------------------------------------------------------------------------------------------------

_CITE_MARK = re.compile(
    r"(?i:[(\[]\s*(?:sources?|cited)\s*:)"  # (source: NVIDIA H100 datasheet)
    r"|(?i:\barXiv:\s?\d{4}\.\d{4,5})"  # arXiv:2407.08608
    r"|[A-Z][\w'-]+ (?:et al\.|and [A-Z][\w'-]+|& [A-Z][\w'-]+),? \(?(?:19|20)\d{2}\b"  # Shah et al., 2024
    r"|\([A-Z][\w'-]+,? (?:19|20)\d{2}\b"  # (Dao, 2023)
    r"|(?i:\b(?:datasheet|whitepaper|white paper)\b)"  # NVIDIA's H100 SXM datasheet
)
_URL = re.compile(r"https?://\S+")
_FILE = re.compile(r"(?<![\w/.-])([\w.-]+(?:/[\w.-]+)*\.(?:json|py|md|txt|csv|ipynb|cuh|cu|yml|yaml|toml))\b")


def _repo_files(root: Path) -> tuple[set[str], set[str]]:
    """The repository's files (tracked, or new and not ignored) by path and by name."""
    try:
        out = subprocess.run(["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                             capture_output=True, check=True, timeout=60).stdout.decode()
        paths = {p for p in out.split("\0") if p}
    except (OSError, subprocess.SubprocessError):
        paths = {p.relative_to(root).as_posix() for p in root.rglob("*")
                 if p.is_file() and not any(s.startswith(".") for s in p.relative_to(root).parts)}
    return paths, {p.rsplit("/", 1)[-1] for p in paths}


_FILES_CACHE: dict[Path, tuple[set[str], set[str]]] = {}


def _cites(sentence: str, root: Path) -> bool:
    if _CITE_MARK.search(sentence) or _URL.search(sentence):
        return True
    found = _FILE.findall(sentence)
    if not found:
        return False
    if root not in _FILES_CACHE:
        _FILES_CACHE[root] = _repo_files(root)
    paths, names = _FILES_CACHE[root]
    for f in found:
        f = f.lstrip("./")
        if f in paths or f in names or any(p.endswith("/" + f) for p in paths):
            return True
    return False


# --- what the notebook's code prints and sets -----------------------------------------------------------------------

def _text(x) -> str:
    return "".join(x) if isinstance(x, list) else (x or "")


def _output_text(cell: dict) -> str:
    out = []
    for o in cell.get("outputs", []):
        if o.get("output_type") == "stream":
            out.append(_text(o.get("text")))
        data = o.get("data", {})
        for mime in ("text/plain", "text/markdown"):
            if mime in data:
                out.append(_text(data[mime]))
        if "text/html" in data:
            out.append(html.unescape(re.sub(r"<[^>]*>", " ", _text(data["text/html"]))))
    # A plot's repr, "<Figure size 1500x360 with 4 Axes>", is no number of the lesson's (and 1500x360 is no ratio).
    return re.sub(r"(?m)^<(?:Figure|matplotlib|Axes)\b[^>\n]*>$", "", "\n".join(out))


# What a printed number measures is read from its surroundings (see _printed_values). A prose number with a unit is
# only supported by a printed number whose surroundings name the same family: GB/s prose is not supported by a
# printed count of milliseconds that happens to have the same digits.
_FAMILIES = {
    "time": r"(?<![A-Za-z/])(?:ns|µs|μs|us|ms|s|sec|seconds?|minutes?|min|hours?|h|time)(?![A-Za-z])",
    "ratio": r"×|\dx\b|(?<![A-Za-z])x(?![A-Za-z])|\s/\s|(?i:speed-?ups?|faster|slower|ratio|\bvs\b|times)",
    "percent": r"%|(?i:percent)",
    "bandwidth": r"[KMGT]i?B/s|(?i:bandwidth)",
    "size": r"(?<![A-Za-z])(?:[KMGT]i?B|kB)(?!/)|(?i:bytes)",
    "compute": r"FLOP|TOPS",
    "frequency": r"[GM]Hz",
    "power": r"(?<![A-Za-z])W(?![A-Za-z])",
    "rate": r"(?i:tokens?|tok|samples?|it|steps?|images?)/s\b",
}
_FAMILY_RX = {f: re.compile(rx) for f, rx in _FAMILIES.items()}


def _family(unit: str | None) -> str | None:
    """The family of a prose number's unit (None for a plain decimal)."""
    if not unit:
        return None
    u = unit.strip()
    if u in ("×", "x"):
        return "ratio"
    if u == "%":
        return "percent"
    if u.endswith("B/s"):
        return "bandwidth"
    if "FLOP" in u or u == "TOPS":
        return "compute"
    if u.endswith("B"):
        return "size"
    if u.endswith("Hz"):
        return "frequency"
    if u == "W":
        return "power"
    if u.endswith("/s"):
        return "rate"
    return "time"


def _families(line: str) -> set[str]:
    return {f for f, rx in _FAMILY_RX.items() if rx.search(line)}


# In a code cell's strings (its f-strings, labels and titles) only unmistakable units count: a variable `x` or `s`, a
# `ms=3` marker size or a `%d` format say nothing.
_SOURCE_FAMILIES = {
    "time": r"(?<![A-Za-z])(?:ns|µs|μs|us|ms)(?![A-Za-z])",
    "ratio": r"×|\}x\b|\dx\b|(?i:speed-?up)",
    "percent": r"\d%|\}%|%\}|(?i:percent)",
    "bandwidth": _FAMILIES["bandwidth"],
    "size": r"(?<![A-Za-z])(?:[KMGT]iB|[KMGT]B|kB)(?!/)",
    "compute": _FAMILIES["compute"],
    "frequency": _FAMILIES["frequency"],
}
_SOURCE_FAMILY_RX = {f: re.compile(rx) for f, rx in _SOURCE_FAMILIES.items()}


def _printed_values(text: str, hints: set[str] = frozenset()) -> dict[str | None, list[Decimal]]:
    """The numbers in a cell's output text: under None all of them, under each family those whose surroundings
    name it: their line, the line before, the first line of their block of output (a title) and the last line above
    them without digits (a table's header); where these name no unit, ``hints``: the units the strings of the
    cell's source name (a plot's axis label, a format string)."""
    found: dict[str | None, list[Decimal]] = {None: []}
    first = header = prev = None
    for line in text.split("\n"):
        if not line.strip():
            first = header = prev = None
            continue
        own = _families(line)
        context = own.union(*(f for f in (first, header, prev) if f is not None)) or set(hints)
        if first is None:
            first = own
        if not re.search(r"\d", line):
            header = own
        prev = own
        for m in _PRINTED.finditer(line):
            v = _value(m.group())
            if v is None:
                continue
            for key in (None, *context):
                found.setdefault(key, []).append(abs(v))
    return found


def _code(source: str) -> tuple[set[Decimal], set[str]]:
    """The number literals of a code cell (not in comments, strings or format specs), and the unit families that
    its strings name."""
    lines = [ln for ln in source.splitlines() if not ln.lstrip().startswith(("%", "!"))]
    vals, strings = set(), []
    try:
        for tok in tokenize.generate_tokens(io.StringIO("\n".join(lines) + "\n").readline):
            if tok.type == tokenize.NUMBER:
                v = _value(tok.string.replace("_", "").rstrip("jJ"))
                if v is not None:
                    vals.add(v)
            elif tok.type == tokenize.STRING:
                strings.append(tok.string)
    except (tokenize.TokenError, IndentationError, SyntaxError):
        code = re.sub(r"#.*", "", "\n".join(lines))
        strings = [m.group() for m in re.finditer(r"(\"|')(?:\\.|(?!\1).)*\1", code)]
        code = re.sub(r"(\"|')(?:\\.|(?!\1).)*\1", "", code)
        vals.update(v for v in (_value(t) for t in re.findall(rf"(?<![\w.])(?:{_NUM})", code)) if v is not None)
    joined = "\n".join(strings)
    return vals, {f for f, rx in _SOURCE_FAMILY_RX.items() if rx.search(joined)}


def _evidence(nb: dict) -> tuple[dict[str | None, list[Decimal]], set[Decimal]]:
    """What a notebook's code cells print (sorted values, by family; None: all) and the numbers they set."""
    printed: dict[str | None, list[Decimal]] = {None: []}
    literals: set[Decimal] = set()
    for cell in nb.get("cells", []):
        if cell.get("cell_type") == "code":
            numbers, hints = _code(_text(cell.get("source")))
            literals |= numbers
            for key, values in _printed_values(_output_text(cell), hints).items():
                printed.setdefault(key, []).extend(values)
    for values in printed.values():
        values.sort()
    return printed, literals


# --- the check ------------------------------------------------------------------------------------------------------

# A prose unit may be a printed one a prefix step away: 16 MB printed as 16,384 KB, 4.3 TB/s as 4,291 GB/s, 0.564 ms
# as 564 µs. Only the steps of the unit's own family; a ratio or a percentage is never rescaled.
_STEPS = {
    "time": (1000,),
    "size": (1000, 1024),
    "bandwidth": (1000, 1024),
    "compute": (1000,),
    "frequency": (1000,),
    "rate": (1000,),
}


def _tolerance(value: Decimal) -> Decimal:
    """Half a unit of the last digit written; for a whole number ending in 0 (800 MB) at least 1% of it."""
    half = Decimal(5).scaleb(value.as_tuple().exponent - 1)
    if value.as_tuple().exponent == 0 and value and value % 10 == 0:
        half = max(half, value / 100)
    return half


def _supported(value: Decimal, printed: list[Decimal], family: str | None = None) -> bool:
    """Some printed value, rounded to ``value``'s precision, is ``value`` (ties either way), also after a prefix
    step of ``family``'s unit."""
    half = _tolerance(value)
    for scale in (1, *(Decimal(s) ** e for s in _STEPS.get(family, ()) for e in (1, -1))):
        lo, hi = (value - half) * scale, (value + half) * scale
        i = bisect.bisect_left(printed, lo)
        if i < len(printed) and printed[i] <= hi:
            return True
    return False


_SUPERSCRIPT = str.maketrans("⁰¹²³⁴⁵⁶⁷⁸⁹⁻", "0123456789-")
# numbers, operators (followed by a space, a digit or a parenthesis), superscript exponents; then = or ≈, at the end
_EXPRESSION = re.compile(
    r"((?:[\d.,()]|[ ×x·*/+^−-](?=[\s\d(⁰¹²³⁴⁵⁶⁷⁸⁹⁻])|[⁰¹²³⁴⁵⁶⁷⁸⁹⁻]+| )+?)\s*(?:=|≈)\s*~?$"
)


def _arithmetic(before: str, value: Decimal) -> bool:
    """The prose shows its arithmetic: ``value`` follows "<numbers and operators> =" or "≈" (2⁻¹¹ ≈ 4.9e-4,
    1024 / 3 ≈ 341.3) and that expression, evaluated, rounds to it."""
    m = _EXPRESSION.search(re.sub(r"\s+", " ", before)[-80:])  # a markdown line break is a space
    if not m or not re.search(r"\d", m.group(1)):
        return False
    expr = re.sub(r"([⁰¹²³⁴⁵⁶⁷⁸⁹⁻]+)", lambda e: "**(" + e.group(1).translate(_SUPERSCRIPT) + ")", m.group(1))
    expr = expr.replace("×", "*").replace("x", "*").replace("·", "*").replace("^", "**").replace("−", "-")
    expr = re.sub(r"(?<=\d),(?=\d{3})", "", expr).strip()
    expr = re.sub(r"^[^\d(-]+", "", expr)  # the clause's comma or period before the expression ("shape, 21.9 + ...")
    try:
        tree = ast.parse(expr, mode="eval")
        return abs(Decimal(repr(float(_evaluate(tree)))) - value) <= _tolerance(value)
    except (SyntaxError, ArithmeticError, ValueError, TypeError, InvalidOperation):
        return False


_OPERATORS = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
              ast.Div: lambda a, b: a / b}


def _evaluate(node):
    """Numbers, + - * / and small powers; anything else raises ValueError."""
    if isinstance(node, ast.Expression):
        return _evaluate(node.body)
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        v = _evaluate(node.operand)
        return -v if isinstance(node.op, ast.USub) else v
    if isinstance(node, ast.BinOp):
        a, b = _evaluate(node.left), _evaluate(node.right)
        if isinstance(node.op, ast.Pow):
            if abs(b) > 64 or abs(a) > 1e6:
                raise ValueError("too large")
            return float(a) ** b
        if type(node.op) in _OPERATORS:
            return _OPERATORS[type(node.op)](a, b)
    raise ValueError("not arithmetic")


def _nearest(value: Decimal, printed: list[Decimal], n: int = 3) -> list[str]:
    i = bisect.bisect_left(printed, value)
    near = sorted(set(printed[max(0, i - n):i + n]), key=lambda v: abs(v - value))
    near = [v for v in near if value and abs(v - value) <= abs(value) * Decimal("0.25")][:n]
    return [f"{v.normalize():f}" if v == v.to_integral() else str(v) for v in near]


def _load(nb) -> dict:
    if isinstance(nb, dict):
        return nb
    return json.loads(Path(nb).read_text(encoding="utf-8"))


@dataclass(frozen=True)
class Quantity:
    """A number the check looks at, and what supports it."""
    cell: int
    start: int  # offsets in the cell's source text
    end: int
    number: str  # as written, whitespace collapsed
    family: str | None  # its unit's family; None for a plain decimal
    support: str | None  # "printed", "set", "arithmetic", "cited", or None: unsupported
    sentence: str
    why: str = ""


def quantities(path, root: Path | str = REPO) -> list[Quantity]:
    """Every number of the notebook's markdown that the rules check, in order, with what supports it."""
    nb, root = _load(path), Path(root)
    printed, literals = _evidence(nb)
    found = []
    for index, cell in enumerate(nb.get("cells", [])):
        if cell.get("cell_type") != "markdown":
            continue
        text = _text(cell.get("source"))
        masked = _masked(text)
        for a, b in _sentences(text):
            sentence = " ".join(text[a:b].split())
            cited = None
            for m in _QUANTITY.finditer(masked, a, b):
                num, unit = m.group("num"), m.group("unit") or m.group("ratio") or m.group("pct")
                value = _value(num)
                if value is None or ("." not in num and not unit):
                    continue  # a plain whole number: not checked
                family = _family(unit)
                candidates = printed.get(family, [])
                why = ""
                if _supported(value, candidates, family):
                    support = "printed"
                elif value in literals and family in (None, "size", "time"):  # a speed-up is no setting
                    support = "set"
                elif _arithmetic(text[a:m.start()], value):
                    support = "arithmetic"
                else:
                    if cited is None:
                        cited = _cites(text[a:b], root)
                    support = "cited" if cited else None
                if support is None:
                    near = _nearest(value, candidates)
                    why = "not printed by any cell" + (f" as {family}" if family else "")
                    if near:
                        why += f" (nearest printed: {', '.join(near)})"
                    elif family and _supported(value, printed[None], family):
                        why += f" (printed only where no {family} unit is named)"
                found.append(Quantity(index, m.start(), m.end(), " ".join(text[m.start():m.end()].split()), family,
                                      support, sentence, why))
    return found


def check(path, root: Path | str = REPO) -> list[Finding]:
    """The findings for a notebook (a path, or the notebook's JSON as a dict), in cell order."""
    return [Finding(q.cell, q.number, q.sentence, q.why) for q in quantities(path, root) if q.support is None]


def shorten(sentence: str, number: str, width: int = 110) -> str:
    if len(sentence) <= width:
        return sentence
    i = max(0, sentence.find(number))
    a = max(0, min(i - width // 2, len(sentence) - width))
    return ("…" if a else "") + sentence[a:a + width] + ("…" if a + width < len(sentence) else "")


def label(path) -> str:
    m = re.match(r"(\d+)_", Path(path).name)
    return f"L{m.group(1)}" if m else Path(path).stem


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("notebooks", nargs="+")
    args = ap.parse_args(argv)
    total = 0
    for path in args.notebooks:
        for f in check(path):
            print(f.line(label(path)))
            total += 1
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main())
