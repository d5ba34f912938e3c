"""Sequences of different lengths, as PyTorch's nn.utils.rnn handles them.

A batch of padded sequences (T, N, *) holds padding that a recurrent layer should not read. A
PackedSequence keeps only the real steps, time-major: the sequences sorted by length, longest
first, then for each step t the `batch_sizes[t]` sequences still running, one after another:

    lengths 3, 2, 1:  a0 b0 c0 | a1 b1 | a2       data (6, *), batch_sizes [3, 2, 1]

The recurrent layers read it one step at a time (nn/rnn.py). Everything here is indexing,
padding and joining, so gradients flow back to the padded input.
"""
from collections import namedtuple

import numpy

from ... import creation, ops
from ...tensor import Tensor


class PackedSequence(namedtuple("PackedSequence",
                                ["data", "batch_sizes", "sorted_indices", "unsorted_indices"])):
    """(data, batch_sizes, sorted_indices, unsorted_indices): the packed steps, the number of
    sequences at each step (an int64 tensor), and the permutation that sorted the batch by length
    (None when it already was) and its inverse."""

    def __new__(cls, data, batch_sizes, sorted_indices=None, unsorted_indices=None):
        if unsorted_indices is None and sorted_indices is not None:
            unsorted_indices = _invert(sorted_indices)
        return super().__new__(cls, data, batch_sizes, sorted_indices, unsorted_indices)

    def to(self, *args, **kwargs):
        return self._replace(data=self.data.to(*args, **kwargs))

    @property
    def is_cuda(self):
        return self.data.is_cuda


def _invert(permutation):
    inverse = numpy.empty_like(permutation.numpy())
    inverse[permutation.numpy()] = numpy.arange(len(inverse))
    return creation.tensor(inverse)


def _lengths(lengths):
    values = lengths.numpy() if isinstance(lengths, Tensor) else numpy.asarray(lengths)
    if values.ndim != 1 or values.dtype.kind not in "iu":
        raise RuntimeError(f"pack_padded_sequence: lengths must be a 1-D list or tensor of "
                           f"integers, got {values.dtype} of shape {values.shape}")
    return values.astype(numpy.int64)


def pack_padded_sequence(input, lengths, batch_first=False, enforce_sorted=True):
    """Pack a padded batch (T, N, *) ((N, T, *) with batch_first) whose sequence i has
    lengths[i] real steps. With enforce_sorted the lengths must be decreasing; otherwise the
    batch is sorted here and the permutation kept, so the layers give results in input order."""
    lengths = _lengths(lengths)
    batch_axis = 0 if batch_first else 1
    if len(lengths) != input.shape[batch_axis]:
        raise RuntimeError(f"pack_padded_sequence: expected {input.shape[batch_axis]} lengths "
                           f"(the batch of an input of shape {input.shape}), got {len(lengths)}")
    if len(lengths) and lengths.min() <= 0:
        raise RuntimeError("pack_padded_sequence: length of all samples has to be greater than "
                           f"0, but found an element in 'lengths' that is <= 0: {lengths.tolist()}")
    sorted_indices = None
    if enforce_sorted:
        if (numpy.diff(lengths) > 0).any():
            raise RuntimeError(f"pack_padded_sequence: `lengths` array must be sorted in "
                               f"decreasing order when `enforce_sorted` is True, got "
                               f"{lengths.tolist()}; pass enforce_sorted=False to sort here")
    else:
        order = numpy.argsort(-lengths, kind="stable")
        sorted_indices = creation.tensor(order)
        input, lengths = ops.index_select(input, batch_axis, sorted_indices), lengths[order]
    if batch_first:
        input = input.transpose(0, 1)
    if lengths[0] > input.shape[0]:
        raise RuntimeError(f"pack_padded_sequence: a length of {lengths[0]} is longer than the "
                           f"{input.shape[0]} steps of the padded input")
    batch_sizes = (lengths[None, :] > numpy.arange(lengths[0])[:, None]).sum(axis=1)
    data = ops.concatenate([input[t, :b] for t, b in enumerate(batch_sizes.tolist())])
    return PackedSequence(data, creation.tensor(batch_sizes), sorted_indices)


def pad_packed_sequence(sequence, batch_first=False, padding_value=0.0, total_length=None):
    """The inverse of pack_padded_sequence: (padded (T, N, *) or (N, T, *), lengths), the
    batch back in its original order; T is total_length if given, else the longest length."""
    batch_sizes = sequence.batch_sizes.numpy().tolist()
    steps = len(batch_sizes)
    if total_length is not None and total_length < steps:
        raise ValueError(f"pad_packed_sequence: expected total_length to be at least the length "
                         f"of the longest sequence in the input, but got total_length="
                         f"{total_length} and max sequence length being {steps}")
    batch, pieces = batch_sizes[0], ops.split(sequence.data, batch_sizes)
    rest = ((0, 0),) * (sequence.data.ndim - 1)
    padded = ops.stack([ops.pad(p, ((0, batch - p.shape[0]),) + rest, padding_value)
                        for p in pieces])
    if total_length is not None and total_length > steps:
        padded = ops.pad(padded, ((0, total_length - steps), (0, 0)) + rest, padding_value)
    lengths = (numpy.asarray(batch_sizes)[:, None] > numpy.arange(batch)[None, :]).sum(axis=0)
    if sequence.unsorted_indices is not None:
        padded = ops.index_select(padded, 1, sequence.unsorted_indices)
        lengths = lengths[sequence.unsorted_indices.numpy()]
    return (padded.transpose(0, 1) if batch_first else padded), creation.tensor(lengths)


def pad_sequence(sequences, batch_first=False, padding_value=0.0, padding_side="right"):
    """Stack sequences of shapes (L_i, *) into one (T, N, *) tensor ((N, T, *) with
    batch_first), T the longest L_i, the shorter ones padded with padding_value on the
    `padding_side` ("right" or "left")."""
    if padding_side not in ("right", "left"):
        raise ValueError(f"pad_sequence: padding_side must be 'left' or 'right', not "
                         f"{padding_side!r}")
    sequences = list(sequences)
    if not sequences:
        raise RuntimeError("pad_sequence: received an empty list of sequences")
    if any(s.shape[1:] != sequences[0].shape[1:] for s in sequences):
        raise RuntimeError(f"pad_sequence: the sequences must agree after their first "
                           f"dimension, got shapes {[s.shape for s in sequences]}")
    longest = max(s.shape[0] for s in sequences)
    rest = ((0, 0),) * (sequences[0].ndim - 1)

    def padded(s):
        gap = longest - s.shape[0]
        return ops.pad(s, (((0, gap) if padding_side == "right" else (gap, 0)),) + rest,
                       padding_value)

    return ops.stack([padded(s) for s in sequences], 0 if batch_first else 1)


def pack_sequence(sequences, enforce_sorted=True):
    """pack_padded_sequence(pad_sequence(sequences), their lengths)."""
    lengths = [s.shape[0] for s in sequences]
    return pack_padded_sequence(pad_sequence(sequences), lengths, enforce_sorted=enforce_sorted)


def unpad_sequence(padded_sequences, lengths, batch_first=False):
    """The list of sequences of a padded batch, each cut to its length."""
    batch = padded_sequences if batch_first else padded_sequences.transpose(0, 1)
    return [batch[i, :n] for i, n in enumerate(_lengths(lengths).tolist())]


def unpack_sequence(packed_sequences):
    """The list of sequences of a PackedSequence, in input order."""
    padded, lengths = pad_packed_sequence(packed_sequences, batch_first=True)
    return unpad_sequence(padded, lengths, batch_first=True)
