"""The adversarial tier: what a hostile user and a hostile environment do.

Its tests reuse the integration tier's worker harness and the scripts tier's Redis
snapshots, so both folders are importable from here as they are from their own tiers.
"""

from __future__ import annotations

import sys
from pathlib import Path

TESTS_DIR = Path(__file__).resolve().parents[1]
for tier in ("integration", "scripts"):
    if str(TESTS_DIR / tier) not in sys.path:
        sys.path.insert(0, str(TESTS_DIR / tier))
