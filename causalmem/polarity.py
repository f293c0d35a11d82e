"""Outcome polarity guessed from an explicit bilingual lexicon (SPEC §7).

Whole words only: English text is split into words (``error-free`` stays one token) and each
word is looked up in the lexicon as it is — no prefix matching, so "download", "downstream",
"bugfix" and "failover" are not failures. Chinese has no spaces: a CJK run is segmented by
longest match against the same lexicon, and the characters between matches form one filler
token.

Negation has a scope: a negator ("no", "not", "never", "without", "zero", 没有, 未, 不, 无, 零 …)
flips the first polar word within the next three tokens, and a clause boundary (punctuation,
"but", 但是 …) ends it. Repair words ("fixed", "resolved", "prevented", 修复, 解决 …) count as
positive and neutralise the failure words they name within three tokens on either side, so
"fixed the login bug" and "crash resolved" are successes, "fix failed" is not.

The result is a *guess*: the store records it as ``polarity_origin = 'guessed'`` and nothing
retires an edge on a guess.
"""
from __future__ import annotations

import re
from functools import lru_cache

__all__ = ["guess_polarity", "NEGATIVE_EN", "POSITIVE_EN", "NEGATIVE_ZH", "POSITIVE_ZH", "NEGATORS_EN",
           "NEGATORS_ZH", "REPAIR_EN", "REPAIR_ZH"]

NEGATIVE_EN = frozenset("""
fail fails failed failing failure failures error errors errored erroring crash crashes crashed crashing
timeout timeouts deadlock deadlocks deadlocked outage outages down downtime broke broken breaks breaking
bug bugs buggy leak leaks leaked leaking regression regressions exception exceptions corrupt corrupted
corruption lost loss lose losing slow slower slowed slowdown slowness sluggish panic panicked panics reject
rejected rejection complaint complaints complained complain incident incidents injection vulnerability
vulnerabilities vulnerable breach breached rollback rollbacks overload overloaded degraded degradation
unavailable blocked wrong bad worse worst unstable flaky hang hangs hung stuck delayed delay delays missing
throttled denied oom unreachable unresponsive angry churn churned halted outofmemory spike spiked
""".split())
POSITIVE_EN = frozenset("""
fixed resolved solved passed pass passes passing success successes successful successfully succeed succeeded
succeeds works worked working stable faster quicker improved improvement improvements improves safe safer
green caught smooth smoothly saved recovered recovery healthy better approved happy win won ok okay
finished completed complete bugfix hotfix clean restored uptime secure launched shipped delivered fast
prevented prevents avoided avoids mitigated patched eliminated reliable
""".split())
# Repair words: positive themselves, and they cancel the failure words they refer to.
REPAIR_EN = frozenset("""
fixed resolved solved patched mitigated prevented prevents prevent avoided avoids avoid eliminated
caught recovered restored bugfix hotfix
""".split())
NEGATORS_EN = frozenset("""
no not never without zero none nothing cannot nor didn't doesn't don't wasn't weren't isn't aren't
couldn't won't can't hasn't haven't hadn't shouldn't wouldn't
""".split())
# Two-word failures and negators, joined to one token before lookup.
PHRASES_EN = {("timed", "out"): "timed_out", ("rolled", "back"): "rolled_back", ("no", "longer"): "no_longer",
              ("went", "down"): "went_down", ("out", "of"): "out_of"}
NEGATIVE_EN = NEGATIVE_EN | {"timed_out", "rolled_back", "went_down"}
NEGATORS_EN = NEGATORS_EN | {"no_longer"}
# Operational phrasing: the pager, queues, disks and builds (measured on benchmarks/polarity_eval.py).
PHRASES_EN.update({("went", "off"): "went_off", ("backed", "up"): "backed_up", ("filled", "up"): "filled_up",
                   ("blew", "up"): "blew_up", ("went", "red"): "went_red", ("piled", "up"): "piled_up",
                   ("fell", "behind"): "fell_behind", ("went", "green"): "went_green", ("to", "zero"): "to_zero"})
NEGATIVE_EN = NEGATIVE_EN | {"went_off", "backed_up", "filled_up", "blew_up", "went_red", "piled_up", "fell_behind",
                             "stale", "expired", "fired", "restarting", "crashloop", "500s", "5xx", "paged"}
POSITIVE_EN = POSITIVE_EN | {"went_green", "drained", "to_zero"}
# "errors dropped to zero": "to zero" repairs the failure words around it
REPAIR_EN = REPAIR_EN | {"to_zero"}
CLAUSE_EN = frozenset({"but", "however", "although", "though", "yet", "while", "whereas"})

NEGATIVE_ZH = frozenset("""
失败 报错 错误 出错 崩溃 超时 宕机 故障 死锁 泄漏 泄露 回滚 漏洞 异常 卡死 卡顿 丢失 变慢 很慢 太慢 缓慢 停机
中断 不可用 无法 损坏 投诉 阻塞 拒绝 过载 瘫痪 出问题 问题 缺陷 挂了 坏了 延迟 下线 告警 事故
""".split())
POSITIVE_ZH = frozenset("""
成功 修复 解决 通过 稳定 恢复 正常 提升 加快 变快 顺利 完成 改善 优化 好转 畅通 无误 不错 避免 防止 消除 排除 可靠
""".split())
REPAIR_ZH = frozenset("修复 解决 避免 防止 消除 排除 恢复".split())
NEGATORS_ZH = frozenset("没有 没 无 未 不 不再 零 非 别".split())
# Words that contain a negator character but are not negations.
NEUTRAL_ZH = frozenset("非常 未来 不少 不久 无论 不管 不但 不仅 没事".split())
CLAUSE_ZH = frozenset("但是 但 可是 然而 不过 却".split())

_ZH_WORDS = sorted(NEGATIVE_ZH | POSITIVE_ZH | NEGATORS_ZH | NEUTRAL_ZH | CLAUSE_ZH, key=len, reverse=True)
_ZH_MAX = max(len(w) for w in _ZH_WORDS)
_ZH_SET = frozenset(_ZH_WORDS)

_CJK = r"\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_TOKEN = re.compile(rf"(?P<cjk>[{_CJK}]+)|(?P<word>[a-z0-9]+(?:['’][a-z]+(?![0-9]))?(?:-[a-z0-9]+)*)"
                    r"|(?P<stop>[.,;:!?，。；：！？])")
_SCOPE = 3

# token kinds
_NEG, _POS, _NOT, _STOP, _FILL = "neg", "pos", "not", "stop", "fill"


def _en_kind(word: str) -> tuple[str, bool]:
    """(kind, is_repair) of one English word."""
    if word in NEGATORS_EN:
        return _NOT, False
    if word in CLAUSE_EN:
        return _STOP, False
    if word in NEGATIVE_EN:
        return _NEG, False
    if word in POSITIVE_EN:
        return _POS, word in REPAIR_EN
    if "-" in word:
        head, _, tail = word.rpartition("-")
        if tail in ("free", "less") and (head in NEGATIVE_EN or head.split("-")[-1] in NEGATIVE_EN):
            return _POS, False  # error-free, bug-free, crash-less
    return _FILL, False


def _zh_tokens(run: str) -> list[tuple[str, bool]]:
    out: list[tuple[str, bool]] = []
    i, filler = 0, False
    while i < len(run):
        for size in range(min(_ZH_MAX, len(run) - i), 0, -1):
            w = run[i:i + size]
            if w in _ZH_SET:
                if w in NEGATORS_ZH:
                    out.append((_NOT, False))
                elif w in CLAUSE_ZH:
                    out.append((_STOP, False))
                elif w in NEGATIVE_ZH:
                    out.append((_NEG, False))
                elif w in POSITIVE_ZH:
                    out.append((_POS, w in REPAIR_ZH))
                else:
                    out.append((_FILL, False))
                filler = False
                i += size
                break
        else:
            if not filler:
                out.append((_FILL, False))
                filler = True
            i += 1
    return out


def _tokens(text: str) -> list[tuple[str, bool]]:
    words: list[tuple[str, str]] = []
    for m in _TOKEN.finditer(text.lower()):
        if m.lastgroup == "word":
            words.append(("w", m.group()))
        elif m.lastgroup == "cjk":
            words.append(("z", m.group()))
        else:
            words.append(("s", m.group()))
    out: list[tuple[str, bool]] = []
    i = 0
    while i < len(words):
        kind, w = words[i]
        if kind == "w" and i + 1 < len(words) and words[i + 1][0] == "w" and (w, words[i + 1][1]) in PHRASES_EN:
            out.append(_en_kind(PHRASES_EN[(w, words[i + 1][1])]))
            i += 2
            continue
        if kind == "w":
            out.append(_en_kind(w.replace("’", "'")))
        elif kind == "z":
            out.extend(_zh_tokens(w))
        else:
            out.append((_STOP, False))
        i += 1
    return out


# A text is polar only if a lexicon word (or the head of a polar phrase) is one of its ASCII
# letter/digit runs, or it has CJK characters: a C-speed split and a set test tell most neutral
# texts apart before any tokenizing (the write path guesses every outcome's polarity).
_POLAR_RUNS = frozenset(w for w in NEGATIVE_EN | POSITIVE_EN | {a for a, _b in PHRASES_EN} if "_" not in w)
_RUN = re.compile(r"[a-z0-9]+")
_HAS_CJK = re.compile(rf"[{_CJK}]")
_POLAR_RUNS_BYTES = frozenset(w.encode() for w in _POLAR_RUNS if w.isascii())
_RUNS_ONLY = bytes(c if chr(c) in "abcdefghijklmnopqrstuvwxyz0123456789" else 32 for c in range(256))


def guess_polarity(text: str) -> str | None:
    """``positive`` | ``negative`` | ``mixed`` from the lexicon (English and Chinese); ``None`` if
    the text has no polar word."""
    low = (text or "").lower()
    if low.isascii():  # the prefilter's runs by a byte translation (C speed, the same runs as ``_RUN``)
        if _POLAR_RUNS_BYTES.isdisjoint(low.encode("ascii").translate(_RUNS_ONLY).split()):
            return None
        return _decide_shape(_ascii_shape(low))
    if _POLAR_RUNS.isdisjoint(_RUN.findall(low)) and _HAS_CJK.search(low) is None:
        return None
    # agents record the same short outcomes again and again ("deploy failed"): a small memo
    return _guess_short(low) if len(low) <= _MEMO_CHARS else _guess_tokens(low)


_MEMO_CHARS = 200


@lru_cache(maxsize=4096)
def _guess_short(text: str) -> str | None:
    return _guess_tokens(text)


# ASCII texts (most outcomes) take a shorter road to the same answer: the tokens of ``_TOKEN``
# restricted to ASCII (no CJK run, no ’, no full-width stop) cut at C speed, each token's kind from
# one dict, and the verdict memoised on the text's *shape* — its kinds as letters, with the filler
# tokens that cannot matter dropped: a run of more than ``_SCOPE`` fillers blocks every scope
# exactly as ``_SCOPE`` of them do, and fillers before the first or after the last other token are
# never looked at. Texts that differ only in their neutral words ("the deploy #12 failed", "the
# cache of run 7 failed") share a shape.
# an apostrophe's letters run on into digits ("weren't500s"): no contraction, so the tokens are the
# prefilter's runs ("weren", "t500s"), as in ``_TOKEN``
_ASCII_TOKEN = re.compile(r"[a-z0-9]+(?:'[a-z]+(?![0-9]))?(?:-[a-z0-9]+)*|[.,;:!?]")
_STOPS_ASCII = ".,;:!?"
_STOPS_BYTES = [c.encode() for c in _STOPS_ASCII]
_HAS_STOP = re.compile("[.,;:!?]")
# without ' and -, a token is a run of [a-z0-9] or one stop: every other byte separates
_KEEP = frozenset(b"abcdefghijklmnopqrstuvwxyz0123456789" + _STOPS_ASCII.encode())
_SEPARATE = bytes(c if c in _KEEP else 32 for c in range(256))
_LETTER = {(_FILL, False): "f", (_NEG, False): "n", (_POS, False): "p", (_POS, True): "r", (_NOT, False): "x",
           (_STOP, False): "s"}
_FROM_LETTER = {v: k for k, v in _LETTER.items()}
_KIND_LETTER = {w: _LETTER[_en_kind(w)] for w in NEGATIVE_EN | POSITIVE_EN | REPAIR_EN | NEGATORS_EN | CLAUSE_EN}
_KIND_LETTER.update((p, "s") for p in _STOPS_ASCII)
_KIND_BYTES = {w.encode(): k for w, k in _KIND_LETTER.items() if w.isascii()}
_PHRASE_HEADS = frozenset(a for a, _b in PHRASES_EN)
_PHRASE_HEADS_BYTES = frozenset(a.encode() for a in _PHRASE_HEADS)
_FILLER_RUN = re.compile("f{%d,}" % (_SCOPE + 1))


def _ascii_shape(low: str) -> str:
    """The shape of an ASCII lower-case text (see above)."""
    if "-" not in low and "'" not in low:
        raw = low.encode("ascii")
        if _HAS_STOP.search(low) is not None:
            for c in _STOPS_BYTES:
                raw = raw.replace(c, b" " + c + b" ")
        words = raw.translate(_SEPARATE).split()
        if _PHRASE_HEADS_BYTES.isdisjoint(words):
            get = _KIND_BYTES.get
            shape = "".join([get(w, "f") for w in words])
            return _FILLER_RUN.sub("f" * _SCOPE, shape).strip("f")
    toks = _ASCII_TOKEN.findall(low)  # two-word phrases, hyphens, apostrophes: ``_tokens``' own rules
    letters = []
    i, n = 0, len(toks)
    while i < n:
        w = toks[i]
        if i + 1 < n and (w, toks[i + 1]) in PHRASES_EN:
            letters.append(_LETTER[_en_kind(PHRASES_EN[(w, toks[i + 1])])])
            i += 2
            continue
        letters.append(_KIND_LETTER.get(w) or _LETTER[_en_kind(w)])
        i += 1
    return _FILLER_RUN.sub("f" * _SCOPE, "".join(letters)).strip("f")


@lru_cache(maxsize=4096)
def _decide_shape(shape: str) -> str | None:
    return _decide([_FROM_LETTER[c] for c in shape])


def _guess_tokens(text: str) -> str | None:
    """The lexicon algorithm itself (the reference the prefilter of ``guess_polarity`` is tested against)."""
    return _decide(_tokens(text or ""))


def _decide(toks: list[tuple[str, bool]]) -> str | None:
    """The verdict on a text's tokens (kind, is_repair); changes ``toks``."""
    n = len(toks)
    value = [0] * n  # +1 / -1 per polar token after negation; 0 = neutral or cancelled
    for i, (kind, _r) in enumerate(toks):
        if kind == _POS:
            value[i] = 1
        elif kind == _NEG:
            value[i] = -1
    # negation: flips the first polar word within the scope, stops at a clause boundary
    for i, (kind, _r) in enumerate(toks):
        if kind != _NOT:
            continue
        for j in range(i + 1, min(n, i + 1 + _SCOPE)):
            if toks[j][0] == _STOP:
                break
            if toks[j][0] in (_POS, _NEG):
                value[j] = -value[j]
                toks[j] = (toks[j][0], False)  # a negated repair word repairs nothing
                break
    # repair words cancel nearby failure words (but a negated failure is already positive)
    for i, (kind, repair) in enumerate(toks):
        if not repair or value[i] <= 0:
            continue
        for step in (-1, 1):
            j = i + step
            while 0 <= j < n and abs(j - i) <= _SCOPE and toks[j][0] != _STOP:
                if toks[j][0] == _NEG and value[j] < 0:
                    value[j] = 0
                j += step
    pos = sum(1 for v in value if v > 0)
    neg = sum(1 for v in value if v < 0)
    if pos and neg:
        return "mixed" if pos == neg else ("positive" if pos > neg else "negative")
    if neg:
        return "negative"
    if pos:
        return "positive"
    return None
