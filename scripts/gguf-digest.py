#!/usr/bin/env python3
"""Prints a digest of a GGUF file: each metadata key (general.* aside) with a
hash of its value, each tensor with its type, shape and a hash of its bytes.
Two files that print the same lines hold the same model.

  scripts/gguf-digest.py FILE GGUF_PY_DIR
"""

import hashlib, sys
sys.path.insert(0, sys.argv[2])
import gguf
r = gguf.GGUFReader(sys.argv[1])
for k, f in sorted(r.fields.items()):
    if k.startswith("GGUF.") or k in ("general.name", "general.basename", "general.size_label", "general.file_type", "general.quantization_version") or k.startswith("general."):
        continue
    parts = [bytes(f.parts[i]) for i in f.data]
    print("kv", k, hashlib.sha256(b"|".join(parts)).hexdigest()[:16], len(f.data))
for t in sorted(r.tensors, key=lambda t: t.name):
    print("t", t.name, t.tensor_type.name, list(t.shape), hashlib.sha256(bytes(t.data)).hexdigest()[:16])
