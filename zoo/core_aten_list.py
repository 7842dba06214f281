"""Prints PyTorch's Core ATen opset (every op overload tagged `core`) as JSON: [[name, schema], ...].

    python3 -m zoo.core_aten_list > core_aten.json     # needs torch >= 2.1 (1.13 has no core tag)
"""

import json
import sys

import torch


def core_ops():
    ops = []
    for packet_name in dir(torch.ops.aten):
        try:
            packet = getattr(torch.ops.aten, packet_name)
        except (AttributeError, RuntimeError):
            continue
        if not hasattr(packet, "overloads"):
            continue
        for overload in packet.overloads():
            op = getattr(packet, overload)
            if torch.Tag.core in op.tags:
                name = op._schema.name.split("::")[-1]
                if op._schema.overload_name:
                    name += "." + op._schema.overload_name
                ops.append([name, str(op._schema)])
    return sorted(ops)


if __name__ == "__main__":
    if not hasattr(torch.Tag, "core"):
        sys.exit(f"torch {torch.__version__} has no core tag")
    json.dump(core_ops(), sys.stdout, indent=0)
