"""Write the HTTP API's OpenAPI document to docs/openapi.json (`make openapi`): the file a
client generator or a reader takes without running a server. tests/api checks it matches."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from jobcenter.api.app import openapi_document

TARGET = Path(__file__).resolve().parents[1] / "docs" / "openapi.json"


def render() -> str:
    return json.dumps(openapi_document(), indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":
    TARGET.write_text(render())
    print(f"wrote {TARGET}", file=sys.stderr)
