"""Shared fixtures for the viz tests: a demo database and a headless Chromium driver."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from causalmem import Memory
from causalmem.cli import DEVOPS_EDGES

# Stored text that would run if any layer let it through as markup.
XSS = ("ignore <script>document.title='pwned';document.body.appendChild(Object.assign("
       "document.createElement('p'),{id:'pwned'}))</script><img src=x onerror=\"document.title='pwned'\"> \\N \"q\"")


def build_demo(path: Path) -> dict[str, str]:
    """The DevOps graph, one scoped memory, one stored script, one edited memory and one sleep."""
    ids: dict[str, str] = {}
    with Memory(path, embedder=None) as mem:
        mem.record_many([{"decision": d, "outcome": o, "relation": r, "confidence": c} for d, o, r, c in DEVOPS_EDGES])
        e = mem.record_decision(XSS, "production crash", confidence=0.5, user_id="eve")
        ids["xss"] = e.src
        e2 = mem.record_decision("pin the base image", "reproducible builds", confidence=0.8, user_id="eve")
        mem.update(e2.src, "pin the base image digest")
        ids["edited"] = e2.src
        mem.sleep()
    return ids


def chromium_binary() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    return None


def need_chromium() -> str:
    binary = chromium_binary()
    if binary is None:
        if os.environ.get("CAUSALMEM_REQUIRE_BROWSER"):
            pytest.fail("headless Chromium is required here (CAUSALMEM_REQUIRE_BROWSER is set) but not installed")
        pytest.skip("headless Chromium not installed (Debian: apt-get install chromium)")
    return binary


def chromium(url: str, tmp: Path, *, screenshot: Path | None = None, dump_dom: bool = False,
             size: tuple[int, int] = (1300, 900)) -> str:
    """Run headless Chromium once on ``url``; returns the DOM after scripts ran (``--dump-dom``)."""
    binary = need_chromium()
    profile = tmp / f"chromium-profile-{os.getpid()}-{len(list(tmp.iterdir()))}"
    args = [binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars",
            "--no-first-run", "--no-default-browser-check", "--disable-extensions", "--mute-audio",
            f"--user-data-dir={profile}", f"--window-size={size[0]},{size[1]}",
            "--virtual-time-budget=8000"]  # lets the page's fetches and scripts finish before the dump
    if screenshot is not None:
        args.append(f"--screenshot={screenshot}")
    if dump_dom:
        args.append("--dump-dom")
    proc = subprocess.run(args + [url], capture_output=True, timeout=180, check=False)
    if proc.returncode != 0:
        raise AssertionError(f"chromium failed ({proc.returncode}): {proc.stderr.decode('utf-8', 'replace')[-2000:]}")
    return proc.stdout.decode("utf-8", "replace")


def assert_not_blank(png: Path, *, min_std: float = 8.0, min_ink: float = 0.01) -> "object":
    """The screenshot has real content: pixel spread and a share of non-background pixels."""
    from PIL import Image, ImageStat

    img = Image.open(png).convert("RGB")
    stat = ImageStat.Stat(img)
    assert max(stat.stddev) > min_std, f"screenshot looks blank: channel stddev {stat.stddev}"
    px = np.asarray(img, dtype=np.int32)
    bg = px[-2, -2]
    ink = float((np.abs(px - bg).sum(axis=2) > 60).mean())
    assert ink > min_ink, f"only {ink:.4f} of the screenshot differs from the background"
    return img


def count_near(img, rgb: tuple[int, int, int], tol: int = 40) -> int:
    """Pixels within ``tol`` (sum of channel differences) of ``rgb``."""
    px = np.asarray(img.convert("RGB"), dtype=np.int32)
    return int((np.abs(px - np.asarray(rgb, dtype=np.int32)).sum(axis=2) <= tol).sum())


def hex_rgb(color: str) -> tuple[int, int, int]:
    c = color.lstrip("#")
    return int(c[0:2], 16), int(c[2:4], 16), int(c[4:6], 16)
