"""A random PEFT LoRA adapter for SmolLM2-135M, written with the standard
library (the e2e tests and scripts/test-ollama-go-client.sh use it):

    python3 tests/e2e_server/peft_adapter.py OUT_DIR
"""

import json
import random
import struct
import sys


def write_peft(directory, layers=30, hidden=576, kv_out=192, rank=4, alpha=8.0, q_in=None, seed=7):
    """A random PEFT LoRA adapter (Q and V projections of every layer) for
    SmolLM2-135M, written with the standard library: adapter_config.json and
    an F32 adapter_model.safetensors. `q_in` other than `hidden` gives an
    adapter that does not fit the model. At scale alpha/r = 2 the answers
    change and stay fluent; a much stronger one makes the model's greedy
    choices near-ties, which a cached prefix (other rounding) can flip."""
    rng = random.Random(seed)
    q_in = q_in or hidden
    tensors = {}
    for layer in range(layers):
        for proj, n_in, n_out in (("q_proj", q_in, hidden), ("v_proj", hidden, kv_out)):
            stem = f"base_model.model.model.layers.{layer}.self_attn.{proj}"
            tensors[f"{stem}.lora_A.weight"] = ([rank, n_in], [rng.gauss(0, 0.05) for _ in range(rank * n_in)])
            tensors[f"{stem}.lora_B.weight"] = ([n_out, rank], [rng.gauss(0, 0.05) for _ in range(n_out * rank)])
    header, blobs, offset = {}, [], 0
    for name, (shape, values) in tensors.items():
        data = struct.pack(f"<{len(values)}f", *values)
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    head = json.dumps(header).encode()
    head += b" " * (-len(head) % 8)
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / "adapter_model.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(head)) + head + b"".join(blobs))
    config = {"peft_type": "LORA", "r": rank, "lora_alpha": alpha, "target_modules": ["q_proj", "v_proj"]}
    (directory / "adapter_config.json").write_text(json.dumps(config))
    return {p.name: p for p in (directory / "adapter_config.json", directory / "adapter_model.safetensors")}


if __name__ == "__main__":
    import pathlib

    write_peft(pathlib.Path(sys.argv[1]))
