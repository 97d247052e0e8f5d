#!/usr/bin/python3
"""Writes a one-layer image FROM scratch as a `docker save` archive, which
`ctr images import` reads: tests/k8s/up makes the cluster's pause image with
it (no Docker needed for the cluster itself).

usage: mkimage.py OUT.tar NAME:TAG ENTRYPOINT SRC=DEST [SRC=DEST ...]
Each SRC file goes into the image at DEST (mode kept, owner root)."""
import hashlib
import io
import json
import sys
import tarfile


def main(argv):
    if len(argv) < 5:
        sys.exit(__doc__)
    out, ref, entry = argv[1], argv[2], argv[3]
    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w", format=tarfile.PAX_FORMAT) as t:
        for spec in argv[4:]:
            src, _, dest = spec.partition("=")
            info = t.gettarinfo(src, dest.lstrip("/"))
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            info.mtime = 0
            with open(src, "rb") as f:
                t.addfile(info, f)
    layer = layer.getvalue()
    diff = hashlib.sha256(layer).hexdigest()
    config = json.dumps({
        "architecture": "amd64", "os": "linux",
        "config": {"Entrypoint": [entry]},
        "rootfs": {"type": "layers", "diff_ids": ["sha256:" + diff]},
    }).encode()
    cfg = hashlib.sha256(config).hexdigest()
    manifest = json.dumps([{"Config": cfg + ".json", "RepoTags": [ref],
                            "Layers": [diff + "/layer.tar"]}]).encode()
    with tarfile.open(out, "w") as t:
        for name, data in ((diff + "/layer.tar", layer), (cfg + ".json", config),
                           ("manifest.json", manifest)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))


if __name__ == "__main__":
    main(sys.argv)
