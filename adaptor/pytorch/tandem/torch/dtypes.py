"""torch dtypes <-> tandem.v1.DType codes."""

import torch

from tandem import client

TO_CODE = {
    torch.float32: client.FLOAT32,
    torch.float64: client.FLOAT64,
    torch.int64: client.INT64,
    torch.int32: client.INT32,
    torch.bool: client.BOOL,
    torch.bfloat16: client.BFLOAT16,
    torch.float16: client.FLOAT16,
}
FROM_CODE = {code: dtype for dtype, code in TO_CODE.items()}


def code_of(dtype, what="tensor"):
    try:
        return TO_CODE[dtype]
    except KeyError:
        from tandem.errors import CaptureError
        raise CaptureError(f"{what} has dtype {dtype}, which Tandem does not support "
                           f"(supported: {', '.join(str(d) for d in TO_CODE)})") from None


def name_of(dtype, what="tensor"):
    return client.DTYPE_NAMES[code_of(dtype, what)]


def host_tensor(name, tensor):
    """A client.HostTensor over a CPU copy of `tensor` (kept alive by the HostTensor)."""
    t = tensor.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    t = t.contiguous()
    return client.HostTensor(name, code_of(t.dtype, f"tensor '{name}'"), tuple(t.shape), t.data_ptr(),
                             t.numel() * t.element_size(), t)


def to_torch(result_tensor):
    """A torch tensor (owning its memory) from a client.ResultTensor."""
    dtype = FROM_CODE[result_tensor.dtype]
    if not result_tensor.data:
        return torch.empty(result_tensor.shape, dtype=dtype)
    flat = torch.frombuffer(bytearray(result_tensor.data), dtype=dtype)
    return flat.reshape(result_tensor.shape)
