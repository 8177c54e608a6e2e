"""Reading the JSON that the GPU scripts collect (imported by their inline
Python: `sys.path.insert(0, SCRIPT_DIR)`)."""
import json


def records(path):
    """Every JSON value in a file, flattened one level (kiln bench --json
    prints one array per run; llama-bench -o json one array); [] if the
    file is missing."""
    try:
        txt = open(path).read()
    except OSError:
        return []
    dec, i, recs = json.JSONDecoder(), 0, []
    while i < len(txt):
        if txt[i].isspace():
            i += 1
            continue
        o, i = dec.raw_decode(txt, i)
        recs += o if isinstance(o, list) else [o]
    return recs
