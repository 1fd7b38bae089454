"""Where one sample has no unique answer, and how to compare what is unique.

Decided per sample, from the actual input, never per op name:

- Ties: indices returned by sort, argsort, topk, kthvalue, max/min over a
  dim, median, mode are unique only when the values they index are distinct
  along the reduced dim (or the sort is stable). With ties, any tied index is
  right: the indices are checked for what they promise instead, the input's
  values at them (and, for sort and argsort, that they are a permutation).
  Where a row has several most frequent values, mode's value is checked by its
  count in the row (it must be a most frequent one) and its index by the
  value it points at.
- Eigenvectors, singular vectors and QR's factors are unique up to a phase per
  vector (a sign when real) when the spectrum has no repeated value (QR: when
  the matrix has full rank; the canonical QR has R's diagonal real and
  positive, and is compared with the product Q R). They are compared
  after each column is turned so that its largest component (chosen on the
  CPU's output) is real and positive, jointly for U and Vh; and the
  reconstruction (Q diag(L) Q^H, U diag(S) Vh) is compared as well, which is
  unique even where the vectors are not. With a repeated value the vectors
  themselves are unchecked and the reconstruction decides. linalg.eig promises
  no order: its eigenvalues (and vectors) are matched to the CPU's first.
"""
import torch
from torch.utils._pytree import tree_flatten

# OpInfo op -> (index outputs, where the dim is: (positional index in args, default)).
_INDEX_OUTPUTS = {
    "sort": ((1,), 0, -1), "argsort": ((0,), 0, -1),
    "topk": ((1,), 1, -1), "kthvalue": ((1,), 1, -1),
    "max.reduction_with_dim": ((1,), 0, None), "min.reduction_with_dim": ((1,), 0, None),
    "median": ((1,), 0, None), "nanmedian": ((1,), 0, None), "mode": ((1,), 0, -1),
}


def _dim(args, kwargs, position, default):
    if "dim" in kwargs:
        return kwargs["dim"]
    if len(args) > position and isinstance(args[position], int) and not isinstance(args[position], bool):
        return args[position]
    return default


def _ties_along(x, dim):
    """Whether any two values along `dim` are equal (NaNs equal to each other)."""
    if x.numel() < 2:
        return False
    x = x.detach().reshape(-1) if dim is None or x.dim() == 0 else x.detach().movedim(dim, -1)
    if x.is_complex():
        return False  # none of these ops orders complex values
    s = x.to(torch.float64).sort(dim=-1).values
    a, b = s[..., 1:], s[..., :-1]
    return bool(((a == b) | (torch.isnan(a) & torch.isnan(b))).any())


def _several_modes(x, dim):
    """Whether some row has more than one most frequent value (mode's value is then not unique)."""
    rows = x.detach().movedim(dim, -1).reshape(-1, x.shape[dim]) if x.dim() else x.reshape(1, 1)
    for row in rows:
        _, counts = torch.unique(row, return_counts=True)
        if counts.numel() > 1 and int((counts == counts.max()).sum()) > 1:
            return True
    return False


def tie_outputs(op_key, inp, args, kwargs):
    """(index positions, dim, output positions with no unique answer, why) for this
    sample: (None, None, (), None) where the indices are unique."""
    entry = _INDEX_OUTPUTS.get(op_key)
    nothing = (None, None, (), None)
    if entry is None or not isinstance(inp, torch.Tensor):
        return nothing
    positions, position, default = entry
    if kwargs.get("stable") or (op_key == "sort" and len(args) > 2 and args[2] is True):
        return nothing  # a stable sort has one answer even with ties
    dim = _dim(args, kwargs, position, default)
    if dim is None and op_key in ("median", "nanmedian", "max.reduction_with_dim", "min.reduction_with_dim"):
        return nothing  # the full reduction returns no indices
    if not _ties_along(inp, dim):
        return nothing
    if op_key == "mode" and _several_modes(inp, dim if dim is not None else -1):
        return (0, 1), dim, (), "several most frequent values: mode checked by the count of its value"
    return positions, dim, (), "ties in the input: indices checked by the values they point at"


def index_values(op_key, inp, out, positions, dim):
    """`out` with each index output replaced by what it promises: the input's values
    at those indices, and for sort/argsort the sorted indices (a permutation)."""
    single = not isinstance(out, (tuple, list))
    parts = [out] if single else list(out)
    x = inp.detach().cpu()
    if op_key == "mode" and positions == (0, 1):
        return _mode_promise(x, parts, dim)
    for i in positions:
        idx = parts[i].detach().cpu()
        d = dim % x.dim() if x.dim() else 0
        if idx.dim() < x.dim():  # a reduction without keepdim
            idx = idx.unsqueeze(d)
        gathered = x.gather(d, idx.clamp(0, max(x.shape[d] - 1, 0)))
        in_range = bool(((idx >= 0) & (idx < x.shape[d])).all())
        if not in_range:
            gathered = torch.full_like(gathered, float("nan")) if gathered.is_floating_point() else gathered - 1
        promised = [gathered.reshape(parts[i].shape)]
        if op_key in ("sort", "argsort"):
            promised.append(idx.sort(dim=d).values)
        parts[i] = tuple(promised)
    return parts[0] if single else tuple(parts)


def _mode_promise(x, parts, dim):
    """(how often mode's value occurs in its row, whether its index points at it)."""
    d = dim % x.dim() if x.dim() else 0
    values, idx = parts[0].detach().cpu(), parts[1].detach().cpu()
    if x.dim() == 0:
        return (torch.ones_like(idx), (x == values).reshape(idx.shape))
    if idx.dim() < x.dim():
        values, idx = values.unsqueeze(d), idx.unsqueeze(d)
    counts = (x == values).sum(dim=d, keepdim=True)
    in_range = (idx >= 0) & (idx < x.shape[d])
    points = in_range & (x.gather(d, idx.clamp(0, x.shape[d] - 1)) == values)
    return (counts.reshape(parts[0].shape), points.reshape(parts[1].shape))


# --- writes that land twice -----------------------------------------------------------

def _flag(rest, kwargs, position, name):
    if name in kwargs:
        return bool(kwargs[name])
    return bool(rest[position]) if len(rest) > position and isinstance(rest[position], bool) else False


def written_twice(op_key, inp, rest, kwargs):
    """A bool mask of the output positions this sample writes more than once (scatter,
    index_copy, index_put and put without accumulation: which write wins is not
    specified there), or None. Counted by the ops' accumulating forms, on the CPU."""
    if not isinstance(inp, torch.Tensor) or inp.layout != torch.strided:
        return None
    zeros = torch.zeros(inp.shape, dtype=torch.float64)
    try:
        if op_key == "scatter" and "reduce" not in kwargs and len(rest) >= 2:
            dim, index = rest[0], rest[1]
            counts = zeros.scatter_add(dim, index, torch.ones(index.shape, dtype=torch.float64))
        elif op_key == "index_copy" and len(rest) >= 3:
            dim, index, source = rest[0], rest[1], rest[2]
            counts = zeros.index_add(dim, index, torch.ones(source.shape, dtype=torch.float64))
        elif op_key == "index_put" and len(rest) >= 2 and not _flag(rest, kwargs, 2, "accumulate"):
            indices, values = rest[0], rest[1]
            counts = zeros.index_put(indices, torch.ones(values.shape, dtype=torch.float64), accumulate=True)
        elif op_key == "put" and len(rest) >= 2 and not _flag(rest, kwargs, 2, "accumulate"):
            index, source = rest[0], rest[1]
            counts = zeros.put(index, torch.ones(source.shape, dtype=torch.float64), accumulate=True)
        else:
            return None
    except Exception:  # an index the op itself refuses: the plain comparison says so
        return None
    mask = counts > 1
    return mask if bool(mask.any()) else None


def unwritten(out, cpu_out, mask):
    """`out` with the positions in `mask` taken from the CPU's output: not compared."""
    if not isinstance(out, torch.Tensor) or out.shape != mask.shape:
        return out
    return torch.where(mask.to(out.device), cpu_out.to(out.device, out.dtype), out)


# --- pooling over random regions ------------------------------------------------------

FRACTIONAL = {"nn.functional.fractional_max_pool2d": 2, "nn.functional.fractional_max_pool3d": 3}


def random_regions(op_key, kwargs):
    """Whether this sample of a fractional max pool draws its regions (no `_random_samples`):
    a device with another generator pools other regions, so the values are not unique."""
    return op_key in FRACTIONAL and kwargs.get("_random_samples") is None


def pooled_promise(op_key, inp, args, out):
    """What any choice of regions promises, per output: its value occurs in its input
    slice, at least prod(kernel) of the slice's values are <= it (it is a window's
    maximum), and its index (with return_indices) points at it."""
    dims = FRACTIONAL[op_key]
    kernel = args[0] if args else 1
    k = int(torch.tensor(kernel if isinstance(kernel, (tuple, list)) else [kernel] * dims).prod())
    values, indices = (out[0], out[1]) if isinstance(out, (tuple, list)) else (out, None)
    lead = inp.shape[:-dims]
    x = inp.detach().cpu().reshape(*lead, 1, -1)
    o = values.detach().cpu().reshape(*lead, -1, 1)
    promised = [(x == o).any(-1).reshape(values.shape),
                ((x <= o).sum(-1) >= k).reshape(values.shape)]
    if indices is not None:
        idx = indices.detach().cpu().reshape(*lead, -1)
        flat = x.squeeze(-2)
        inside = (idx >= 0) & (idx < flat.shape[-1])
        hit = inside & (flat.gather(-1, idx.clamp(0, flat.shape[-1] - 1)) == o.squeeze(-1))
        promised.append(hit.reshape(indices.shape))
    return tuple(promised)


# --- eigenvectors and singular vectors ------------------------------------------------

QR_OPS = ("linalg.qr", "qr")
VECTOR_OPS = ("linalg.eigh", "linalg.eig", "linalg.svd", "svd", "svd_lowrank", "pca_lowrank",
              "linalg.eigvals") + QR_OPS
# Per op, the outputs (as the op returns them) not unique before canonical(): vectors,
# and linalg.eig's unordered eigenvalues.
RAW_AMBIGUOUS = {"linalg.eigh": (1,), "linalg.eig": (0, 1), "linalg.eigvals": (0,),
                 "linalg.qr": (0, 1), "qr": (0, 1)}
# Ops returning V where linalg.svd returns Vh.
_RETURNS_V = ("svd", "svd_lowrank", "pca_lowrank")


def _pivot(vectors):
    """Per column, the row of its largest component (read on the CPU's output)."""
    return vectors.abs().argmax(dim=-2, keepdim=True)


def _phases(vectors, pivot):
    """Per column, the unit factor that makes the pivot component real and positive."""
    at = vectors.gather(-2, pivot)
    size = at.abs()
    unit = torch.where(size > 0, at / torch.where(size > 0, size, torch.ones_like(size)), torch.ones_like(at))
    return unit  # shape (..., 1, k)


def _repeated(values, dtype):
    """Whether sorted-or-not `values` (..., k) hold two equal up to sqrt(eps) of their scale."""
    if values.shape[-1] < 2:
        return False
    v = values.detach().to(torch.complex128 if values.is_complex() else torch.float64)
    eps = torch.finfo(dtype).eps if (dtype.is_floating_point or dtype.is_complex) else 1e-7
    scale = v.abs().amax(dim=-1, keepdim=True).clamp_min(1e-30)
    gaps = (v.unsqueeze(-1) - v.unsqueeze(-2)).abs() / scale.unsqueeze(-1)
    gaps = gaps + torch.eye(v.shape[-1], dtype=torch.float64) * 1e30
    return bool((gaps <= eps ** 0.5).any())


def _order(values, reference):
    """The indices that reorder `values` to follow `reference` (both read on the CPU): each
    reference eigenvalue takes the nearest unused one. linalg.eig promises no order."""
    values, reference = values.detach().cpu(), reference.detach().cpu()
    order = torch.empty(values.shape, dtype=torch.long)
    flat_v, flat_r = values.reshape(-1, values.shape[-1]), reference.reshape(-1, reference.shape[-1])
    flat_o = order.reshape(-1, values.shape[-1])
    for b in range(flat_v.shape[0]):
        distance = (flat_r[b].unsqueeze(-1).to(torch.complex128) - flat_v[b].unsqueeze(0).to(torch.complex128)).abs()
        for i in range(distance.shape[0]):
            j = int(distance[i].argmin())
            flat_o[b, i] = j
            distance[:, j] = float("inf")
    return order


def _matched(values, vectors, reference):
    """`values` (and `vectors`' columns) reordered to follow `reference` (see _order)."""
    order = _order(values, reference).to(values.device)
    values = values.gather(-1, order)
    if vectors is not None:
        vectors = vectors.gather(-1, order.unsqueeze(-2).expand(vectors.shape))
    return values, vectors


def _svd_parts(op_key, out):
    u, s, v = out[0], out[1], out[2]
    vh = v.mH if op_key in _RETURNS_V else v
    k = s.shape[-1]
    return u[..., :k], s, vh[..., :k, :]   # full_matrices' completion is not unique


def _norm(values):
    """The matrix's 2-norm from the CPU's eigen/singular values, shaped to divide a
    batch of rebuilt matrices. A decomposition is accurate relative to the matrix's
    norm, not elementwise: its rebuilt matrix is compared in units of that norm, so a
    small element is not held to its own last digits (n·eps·|A| is the promise)."""
    size = values.detach().abs().amax(dim=-1, keepdim=True).unsqueeze(-1)
    return torch.where(size > 0, size, torch.ones_like(size))


def _qr_parts(out):
    """(Q, R) without mode='complete''s completion (not unique); Q is empty in mode='r'."""
    q, r = out[0], out[1]
    k = min(r.shape[-2], r.shape[-1])
    return (q[..., :k] if q.numel() else q), r[..., :k, :]


def _qr_units(r):
    """Per row of R, the unit factor of its diagonal entry (1 where that entry is 0)."""
    d = r.diagonal(dim1=-2, dim2=-1)
    size, one = d.abs(), torch.ones_like(d)
    return torch.where(size > 0, d / torch.where(size > 0, size, torch.ones_like(size)), one)


def _qr_turned(out):
    """Q and R turned so that R's diagonal is real and positive: Q D, D^H R for the
    unit diagonal D of R's own diagonal's phases (the product is unchanged)."""
    q, r = _qr_parts(out)
    unit = _qr_units(r)
    turned_r = r * unit.conj().unsqueeze(-1)
    return (q * unit.unsqueeze(-2) if q.numel() else q), turned_r


def _rank_deficient(r, dtype):
    """Whether some diagonal entry of R is negligible beside the largest (up to sqrt(eps)):
    the matrix then has no unique QR."""
    d = r.detach().diagonal(dim1=-2, dim2=-1).abs().to(torch.float64)
    if d.numel() == 0:
        return False
    eps = torch.finfo(dtype).eps if (dtype.is_floating_point or dtype.is_complex) else 1e-7
    scale = r.detach().abs().to(torch.float64).amax(dim=(-2, -1), keepdim=True).squeeze(-1).clamp_min(1e-30)
    return bool((d <= eps ** 0.5 * scale).any())


def _qr_canonical(out, cpu_out, dtype):
    q, r = _qr_turned(out)
    parts = [q, r]
    if q.numel():
        _, cpu_r = _qr_parts(cpu_out)
        scale = cpu_r.detach().abs().amax(dim=(-2, -1), keepdim=True)
        scale = torch.where(scale > 0, scale, torch.ones_like(scale))
        rebuilt = q @ r
        parts.append(rebuilt / scale.to(rebuilt.dtype))
    if _rank_deficient(_qr_parts(cpu_out)[1], dtype):
        return tuple(parts), (0, 1), "a rank-deficient matrix: Q and R are not unique"
    return tuple(parts), (), None


def canonical(op_key, out, cpu_out, dtype):
    """(canonical outputs, positions with no unique answer, why) for a vector-returning op.

    Applied alike to the target's, the CPU's and the truth's outputs, with pivots
    read on `cpu_out`; returns (out, (), None) for any other op.
    """
    if op_key == "linalg.eigvals" and isinstance(out, torch.Tensor):
        if out.numel() == 0 or out.shape != cpu_out.shape:
            return out, (), None  # nothing to reorder, or a shape the comparison will name
        return _matched(out, None, cpu_out)[0], (), None
    if op_key not in VECTOR_OPS or not isinstance(out, (tuple, list)):
        return out, (), None
    if op_key in QR_OPS:
        if cpu_out[1].numel() == 0:
            return tuple(out), (), None  # an empty matrix: nothing but shapes
        return _qr_canonical(out, cpu_out, dtype)
    if any(isinstance(t, torch.Tensor) and t.numel() == 0 for t in cpu_out):
        return tuple(out), (), None  # an empty matrix: no vectors to turn, nothing but shapes
    if op_key in _RETURNS_V and not bool((cpu_out[0] != 0).any()):
        return tuple(out), (), None  # compute_uv=False: U and V are zero placeholders
    if op_key in ("linalg.eigh", "linalg.eig"):
        values, vectors = out[0], out[1]
        if op_key == "linalg.eig":
            values, vectors = _matched(values, vectors, cpu_out[0])
        pivot = _pivot(cpu_out[1])
        turned = vectors * _phases(vectors, pivot).conj()
        parts = [values, turned]
        if op_key == "linalg.eigh":
            rebuilt = vectors @ torch.diag_embed(values.to(vectors.dtype)) @ vectors.mH
            parts.append(rebuilt / _norm(cpu_out[0]).to(rebuilt.dtype))
        repeated = _repeated(cpu_out[0], dtype)
    else:
        u, s, vh = _svd_parts(op_key, out)
        cu, cs, _ = _svd_parts(op_key, cpu_out)
        phase = _phases(u, _pivot(cu))
        rebuilt = u @ torch.diag_embed(s.to(u.dtype)) @ vh
        parts = [u * phase.conj(), s, vh * phase.mT, rebuilt / _norm(cs).to(rebuilt.dtype)]
        repeated = _repeated(cpu_out[1], dtype)
    if repeated:
        vector_positions = (1,) if op_key.startswith("linalg.eig") else (0, 2)
        return tuple(parts), vector_positions, "repeated eigen/singular values: the vectors are not unique"
    return tuple(parts), (), None


def lowrank_exact(op_key, args, kwargs, cpu_out, dtype):
    """Whether svd_lowrank/pca_lowrank's answer is unique for this sample: its random
    projection then captures the whole matrix (a @ b.mT, centred for PCA), so the
    CPU's decomposition reproduces it; below the rank the answer depends on the draw."""
    inp, b = args[0], args[1]
    wide = torch.complex128 if inp.is_complex() else torch.float64
    a = inp.detach().to(wide) @ b.detach().to(wide).mT
    if op_key == "pca_lowrank" and kwargs.get("center", True):
        a = a - a.mean(dim=-2, keepdim=True)
    u, s, vh = _svd_parts(op_key, cpu_out)
    rebuilt = (u @ torch.diag_embed(s.to(u.dtype)) @ vh).to(wide)
    eps = torch.finfo(dtype).eps
    return bool(((rebuilt - a).abs() <= eps ** 0.5 * (1 + a.abs().amax())).all())


# --- gradients through vectors -------------------------------------------------------

def gradient_not_unique(op_key, args, kwargs, cpu_out, dtype):
    """Why the gradient of a vector op's sample has no unique answer even in canonical
    form (repeated eigen/singular values; a low-rank projection below the rank), or None."""
    if op_key not in VECTOR_OPS or not isinstance(cpu_out, (tuple, list, torch.Tensor)):
        return None
    if op_key in QR_OPS:
        if _rank_deficient(_qr_parts(cpu_out)[1], dtype):
            return "a rank-deficient matrix: Q and R, and so their gradient, are not unique"
        return None
    if op_key == "linalg.eigvals" or op_key.startswith("linalg.eig"):
        values = cpu_out if op_key == "linalg.eigvals" else cpu_out[0]
    else:
        values = _svd_parts(op_key, cpu_out)[1]
    if values.numel() and _repeated(values, dtype):
        return "repeated eigen/singular values: the vectors, and so their gradient, are not unique"
    if op_key in ("svd_lowrank", "pca_lowrank") and not lowrank_exact(op_key, args, kwargs, cpu_out, dtype):
        return "q below the matrix's rank: the approximation depends on the random projection"
    if op_key in ("svd_lowrank", "pca_lowrank"):
        # Unique in exact arithmetic, but its rounding error is the draw's: on the CPU, other
        # projections err up to 1300x the reference's (benchmarks/README.md, svd_lowrank).
        return ("a randomized algorithm: the gradient's rounding error depends on the random projection, "
                "which the target draws with its own generator, so the CPU's error does not bound it")
    return None


def gauge_fixed(op_key, out, reference):
    """A vector op's outputs in canonical form, as differentiable functions of them: eig's
    eigenvalues (and vectors) in `reference`'s order, each vector turned by its own pivot
    component's phase (pivots read on `reference`, the CPU's output), U and Vh turned
    together, full_matrices' completion left out. A gradient through these is unique
    (invariant under the free phases), so it can be compared across devices."""
    if op_key in QR_OPS and reference[1].numel():
        q, r = _qr_turned(out)
        return (q, r) if q.numel() else (r,)   # mode='r': no Q
    if any(isinstance(t, torch.Tensor) and t.numel() == 0 for t in tree_flatten(reference)[0]):
        return tuple(out) if isinstance(out, (tuple, list)) else (out,)  # empty: no vector to turn
    if op_key == "linalg.eigvals":
        return (out.gather(-1, _order(out, reference).to(out.device)),)

    if op_key in ("linalg.eigh", "linalg.eig"):
        values, vectors = out[0], out[1]
        if op_key == "linalg.eig":
            order = _order(values, reference[0]).to(values.device)
            values = values.gather(-1, order)
            vectors = vectors.gather(-1, order.unsqueeze(-2).expand(vectors.shape))
        pivot = _pivot(reference[1].detach().cpu()).to(vectors.device)
        return (values, vectors * _phases(vectors, pivot).conj())
    u, s, vh = _svd_parts(op_key, out)
    phase = _phases(u, _pivot(_svd_parts(op_key, reference)[0].detach().cpu()).to(u.device))
    return (u * phase.conj(), s, vh * phase.mT)
