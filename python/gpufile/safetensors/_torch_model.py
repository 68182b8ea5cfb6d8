"""Tensors that share memory, for gpufile.safetensors.torch: storage_ptr,
storage_size, save_model and load_model as safetensors.torch has them,
and save_file's refusal of tensors that share memory (issue 34 item 3).

A state dict often holds one tensor under two names (tied embeddings:
lm_head.weight is embed.weight). The format cannot say so: writing both
writes the bytes twice, and loading gives two tensors that no longer
share. So save_file refuses such a dict, naming the tensors, and
save_model keeps one name per shared storage (the others listed in the
metadata as other_name -> kept_name), which load_model loads back through
the model's own sharing.

Torch is imported by the caller; nothing here imports it.
"""

import collections


def storage_ptr(tensor):
    """The address of the start of tensor's storage (not of the tensor: a
    view starts inside it); 0 for a tensor without memory (device
    "meta")."""
    try:
        return tensor.untyped_storage().data_ptr()
    except Exception:
        pass
    try:
        return tensor.storage().data_ptr()  # torch < 2.0
    except NotImplementedError:
        return 0


def storage_size(tensor):
    """The size in bytes of tensor's whole storage (at least the tensor's
    own bytes, more for a view of part of it)."""
    try:
        return tensor.untyped_storage().nbytes()
    except AttributeError:
        pass
    try:
        return tensor.storage().size() * tensor.element_size()  # torch < 2.0
    except NotImplementedError:
        return tensor.nelement() * tensor.element_size()


def _extent(t):
    """[first byte, past the last byte) of the elements of t, whatever its
    strides (torch strides are never negative)."""
    start = t.data_ptr()
    if t.nelement() == 0:
        return start, start
    last = sum((n - 1) * s for n, s in zip(t.shape, t.stride()))
    return start, start + (last + 1) * t.element_size()


def shared_groups(tensors):
    """[set of names] of the torch tensors of tensors (a dict) that share
    memory: on one device and storage, with overlapping bytes. Tensors
    without memory (meta, or an empty storage) share with nothing."""
    by_storage = collections.defaultdict(list)
    for name, t in tensors.items():
        if type(t).__module__.split(".")[0] != "torch" or t.device.type == "meta":
            continue
        ptr, size = storage_ptr(t), storage_size(t)
        if ptr and size:
            by_storage[(str(t.device), ptr, size)].append(name)
    groups = []
    for names in by_storage.values():
        if len(names) < 2:
            continue
        spans = sorted((_extent(tensors[n]), n) for n in names)
        group, end = None, None
        for (b, e), n in spans:
            # A tensor that starts before every earlier one ended shares
            # bytes with one of them (end is the furthest end so far).
            if group is not None and b < end:
                group.add(n)
                end = max(end, e)
                continue
            if group is not None and len(group) > 1:
                groups.append(group)
            group, end = {n}, e
        if len(group) > 1:
            groups.append(group)
    return sorted(groups, key=sorted)


def refuse_shared(tensors, where):
    """RuntimeError (as safetensors.torch.save_file raises) when tensors
    share memory: written twice, they would load as two tensors."""
    groups = shared_groups(tensors)
    if groups:
        raise RuntimeError(
            "%s: some tensors share memory, and the file would hold their bytes "
            "twice and load them as separate tensors: %s. Save one name per "
            "shared tensor (or .clone() the others), or save a module with "
            "gpufile.safetensors.torch.save_model, which keeps one name per "
            "shared storage." % (where, "; ".join(
                "{%s}" % ", ".join(repr(n) for n in sorted(g)) for g in groups)))


def _whole(t):
    """Whether t covers its storage exactly (a view of part does not)."""
    return (t.data_ptr() == storage_ptr(t)
            and t.nelement() * t.element_size() == storage_size(t))


def names_to_drop(state_dict, preferred_names=(), discard_names=()):
    """{kept name: [other names]} for each group of state_dict's tensors
    sharing memory: the kept one covers its storage whole (the others are
    the same tensor under other names, or views of it), chosen as
    safetensors chooses it: the first by name among those in
    preferred_names (the names of a file being loaded), else among those
    not in discard_names, else among all. RuntimeError when no tensor of
    a group covers its storage: saving views of part of one would not
    keep what they share."""
    preferred, discard = set(preferred_names), set(discard_names)
    out = {}
    for group in shared_groups(state_dict):
        whole = {n for n in group if _whole(state_dict[n])}
        if not whole:
            raise RuntimeError(
                "tensors %s share memory, and none covers it whole: there is no "
                "name to keep for it when saving or loading the model (see "
                "https://huggingface.co/docs/safetensors/torch_shared_tensors)"
                % sorted(group))
        keep = min(whole & preferred or whole - discard or whole)
        out[keep] = sorted(group - {keep})
    return out


def save_model(save_file, model, filename, metadata=None, force_contiguous=True):
    """safetensors.torch.save_model: model.state_dict() written with
    save_file, one name per shared storage (each other name recorded in
    the metadata as name -> kept name, unless metadata already has that
    key); force_contiguous: non-contiguous tensors written contiguous."""
    state_dict = model.state_dict()
    meta = dict(metadata) if metadata is not None else None
    for keep, others in names_to_drop(state_dict).items():
        for name in others:
            if meta is None:
                meta = {}
            meta.setdefault(name, keep)
            del state_dict[name]
    if force_contiguous:
        state_dict = {k: v.contiguous() for k, v in state_dict.items()}
    try:
        save_file(state_dict, filename, metadata=meta)
    except ValueError as e:
        raise ValueError("%s Or use save_model(..., force_contiguous=True)." % e) from None


def load_model(load_file, model, filename, strict=True, device="cpu"):
    """safetensors.torch.load_model: the file's tensors loaded into model
    (load_state_dict), a name the model shares with a loaded one counted
    as loaded. Returns (missing: set, unexpected: list) of names; with
    strict, RuntimeError when either is not empty."""
    state_dict = load_file(filename, device=device)
    dropped = names_to_drop(model.state_dict(), preferred_names=state_dict.keys())
    missing, unexpected = model.load_state_dict(state_dict, strict=False)
    missing, unexpected = set(missing), list(unexpected)
    for others in dropped.values():
        for name in others:
            if name in missing:
                missing.remove(name)
            else:
                unexpected.append(name)
    if strict and (missing or unexpected):
        msg = "Error(s) in loading state_dict for %s:" % type(model).__name__
        if missing:
            msg += "\n    Missing key(s) in state_dict: %s" % ", ".join(
                '"%s"' % k for k in sorted(missing))
        if unexpected:
            msg += "\n    Unexpected key(s) in state_dict: %s" % ", ".join(
                '"%s"' % k for k in sorted(unexpected))
        raise RuntimeError(msg)
    return missing, unexpected
