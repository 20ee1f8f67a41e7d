"""Regenerate controlplane/v1 (pb2, pyi, grpc) from proto/controlplane/v1.

Run: python scripts/gen_proto.py          (writes the generated files)
     python scripts/gen_proto.py --check  (exits 1 when the committed files are stale)
"""

from __future__ import annotations

import argparse
import filecmp
import shutil
import sys
import tempfile
from importlib import resources
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "proto"
OUT_PKG = Path("controlplane") / "v1"


def generate(out_root: Path) -> list[Path]:
    protos = sorted(p.relative_to(PROTO_ROOT) for p in (PROTO_ROOT / OUT_PKG).glob("*.proto"))
    include = str(resources.files("grpc_tools") / "_proto")
    args = [
        "protoc",
        f"-I{PROTO_ROOT}",
        f"-I{include}",
        f"--python_out={out_root}",
        f"--pyi_out={out_root}",
        f"--grpc_python_out={out_root}",
        *(str(p) for p in protos),
    ]
    if protoc.main(args) != 0:
        sys.exit("protoc failed")
    return sorted((out_root / OUT_PKG).glob("*_pb2*.py*"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail when committed code is stale")
    ns = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        generated = generate(Path(tmp))
        target = ROOT / OUT_PKG
        committed = sorted(p for p in target.glob("*_pb2*.py*"))
        if ns.check:
            names_new = {p.name for p in generated}
            names_old = {p.name for p in committed}
            stale = sorted(names_new ^ names_old)
            stale += [
                p.name
                for p in generated
                if p.name in names_old and not filecmp.cmp(p, target / p.name, shallow=False)
            ]
            if stale:
                print("generated code is stale; run: python scripts/gen_proto.py", file=sys.stderr)
                for name in stale:
                    print(f"  {OUT_PKG / name}", file=sys.stderr)
                return 1
            print("generated code is fresh")
            return 0
        for old in committed:
            old.unlink()
        for new in generated:
            shutil.copy(new, target / new.name)
        print(f"wrote {len(generated)} files to {OUT_PKG}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
