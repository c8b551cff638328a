"""The bookkeeping a sink cache's layers share (:class:`SinkBook`): which tokens each row keeps,
where their keys are rotated, and each step's plan, all on the CPU (see :mod:`.caches`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from ..core.errors import check
from .rope import ForwardTaps, RopeShift


class SinkBook:
    """What every layer of one sink cache shares: which tokens each row keeps, where their keys
    are rotated, and this step's plan (worked out once, by layer 0, for all layers). Everything
    here is on the CPU: (B, kept) tensors, one row per sequence. ``taps`` record what the
    caller passes each forward; the book is their one owner, so their hooks leave the model with
    the cache. ``ropes`` holds each layer's rotary frequencies (:func:`~.rope.layer_shifts`)."""

    def __init__(self, n_sink: int, window: int, ropes: list[RopeShift], taps: ForwardTaps) -> None:
        self.n_sink, self.window, self.ropes, self.taps = n_sink, window, ropes, taps
        self.reset()

    def reset(self) -> None:
        self.positions = torch.zeros(1, 0, dtype=torch.long)  # each kept token's index among its row's real tokens (pads: < 0)
        self.rotated_at = torch.zeros(1, 0, dtype=torch.long)  # where its key is rotated, as stored
        self.pads: Optional[torch.Tensor] = None  # (B,) leading pad columns of each row; None without padding
        self.following = torch.zeros(1, dtype=torch.long)  # (B,) each row's position after its newest token
        self.seen = 0  # columns fed, pads included
        self.given = False  # whether the latest step's caller passed positions
        self.step: Optional[_Step] = None

    @property
    def batch(self) -> int:
        return self.rotated_at.shape[0]

    def sequence_length(self) -> int:
        """``get_seq_length``: the columns fed when the caller numbers the tokens, else
        :meth:`next_position`."""
        return self.seen if self._positions_given() else self.next_position()

    def _positions_given(self) -> bool:
        """Whether the running forward's caller passes positions; between forwards, the latest step's."""
        given = self.taps.positions_given()
        return self.given if given is None else given

    def next_position(self) -> int:
        """The position the next token is rotated at in a manual loop that passes no positions:
        right after the newest kept key, so that no recent key has to move, until that runs a
        whole window ahead of the token's index in the cache; then the index itself, and that step
        stores the recent keys moved there (a rebase). Positions stay below ``n_sink + 2 * window``
        however long the stream, and a key is re-rotated at most once while it is kept: the rebase
        comes every ``window`` steps, and a key stays ``window - 1``."""
        n_kept = self.rotated_at.shape[1]
        if n_kept == 0:
            return 0
        follow = int(self.rotated_at[0, -1]) + 1
        return follow if 0 <= follow - n_kept < self.window else n_kept

    def begin_step(self, batch: int, n_new: int) -> "_Step":
        """Plan a forward that feeds ``n_new`` tokens per row: which keys must be moved to be seen
        at their cache index (usually only the sinks), and which tokens to drop after the step."""
        check(
            not self.taps.closed,
            "this sink cache was closed (its `with sink_cache(...)` block ended) and no longer "
            "sees the model's positions; make a new one",
        )
        if self.seen == 0:
            self.rotated_at = self.positions = torch.zeros(batch, 0, dtype=torch.long)
        check(
            batch == self.batch,
            f"the sink cache holds a batch of {self.batch}; this forward feeds {batch} (reset it for a new batch)",
        )
        self.given = given = self._positions_given()
        self._check_padding(n_new, given)
        new = self._new_positions(n_new, given)
        n_old = self.rotated_at.shape[1]
        rotated_at = torch.cat([self.rotated_at, new], dim=1)
        target = _presented_positions(new, n_old, rotated_at.shape[1]).expand_as(rotated_at)
        n_sink = min(self.n_sink, rotated_at.shape[1])
        sink_rotation = rotation = None
        if not torch.equal(rotated_at[:, n_sink:], target[:, n_sink:]):  # a rebase, or the caller changed frames
            rotation = _Rotation(rotated_at.clone(), target)
            rotated_at[:, n_sink:] = target[:, n_sink:]  # the step stores the recent keys where it moved them
        elif not torch.equal(rotated_at[:, :n_sink], target[:, :n_sink]):
            sink_rotation = _Rotation(rotated_at[:, :n_sink].clone(), target[:, :n_sink])
        columns = torch.arange(self.seen, self.seen + n_new).expand(batch, n_new)
        positions = torch.cat([self.positions, columns if self.pads is None else columns - self.pads[:, None]], dim=1)
        dropped = max(0, rotated_at.shape[1] - (self.n_sink + self.window - 1))
        shift = self._sink_shift(n_old, dropped)
        self.step = _Step(n_old, n_new, sink_rotation, rotation, dropped, shift)
        self.rotated_at, self.positions = (_evict(x, self.n_sink, dropped, shift) for x in (rotated_at, positions))
        self.following = new[:, -1] + 1
        self.seen += n_new
        return self.step

    def _new_positions(self, n_new: int, given: bool) -> torch.Tensor:
        """(B, n_new) positions of the new tokens. A prefill (the first step, or several tokens)
        reads the caller's and checks that each row's real tokens are consecutive; a single
        token continues each row, or takes the cache's proposal, and is checked when the caller's
        positions are in host memory. Pads get the positions that continue their row backwards."""
        recorded = self.taps.recorded_positions()
        if self.seen == 0 or n_new > 1:
            caller = recorded.cpu().reshape(-1, n_new).expand(self.batch, n_new)
            real = (
                torch.ones_like(caller, dtype=torch.bool)
                if self.pads is None or self.seen
                else self.pads[:, None] <= torch.arange(n_new)
            )
            consecutive = ((caller.diff(dim=1) == 1) | ~real[:, :-1]).all()
            check(
                bool(consecutive),
                f"the sink cache needs {n_new} consecutive positions for the new tokens; the model used {caller[0].tolist()[:8]}",
            )
            return caller[:, -1:] - (n_new - 1) + torch.arange(n_new)
        expected = (self.following if given else torch.full((self.batch,), self.next_position()))[:, None]
        if _on_host(recorded):
            caller = recorded.reshape(-1, 1).expand(self.batch, 1)
            check(
                torch.equal(caller, expected),
                f"the sink cache expected the new token at {expected[:8, 0].tolist()} (each row's previous position + 1, "
                f"or the cache's proposal when no positions are passed); the model used {caller[:8, 0].tolist()}",
            )
        return expected

    def _check_padding(self, n_new: int, given: bool) -> None:
        """Learn the rows' left padding at the first step; refuse masks that would not line up
        with the kept keys (read only at a prefill, like the positions)."""
        mask = self.taps.attention_mask()
        if mask is None or mask.dim() != 2:
            check(self.pads is None, "a left-padded batch needs its 2-D attention_mask at every step")
            return
        check(
            mask.shape[-1] == self.seen + n_new,
            f"the attention mask has {mask.shape[-1]} columns; "
            f"the sink cache needs one per token fed so far ({self.seen + n_new}), as generate keeps it",
        )
        if self.seen == 0 or n_new > 1:
            mask = mask.cpu().bool()
            pads = (~mask).sum(dim=1)
            left_padded = torch.equal(mask, pads[:, None] <= torch.arange(mask.shape[-1])) and bool((pads < mask.shape[-1]).all())
            check(
                left_padded,
                "the sink cache takes left padding only: "
                "each row's attention mask must be zeros, then ones, with at least one one",
            )
            if self.seen == 0:
                self.pads = pads if bool(pads.any()) else None
            check(
                torch.equal(pads, torch.zeros_like(pads) if self.pads is None else self.pads),
                "the attention mask's padding changed during the stream",
            )
        check(
            self.pads is None or given,
            "a left-padded batch needs position_ids that count each row's real tokens (model.generate passes them)",
        )

    def _sink_shift(self, n_old: int, dropped: int) -> Optional[list[int]]:
        """How far each row's sink slots move along its columns as ``dropped`` tokens leave: a
        left-padded row shorter than the cache holds its columns in order, pads first, so its
        first slots shed pads until its first real token reaches slot 0; then they stay."""
        if self.pads is None or not dropped:
            return None
        first = self.seen - n_old  # the column in slot 0 of a row that holds its columns in order
        shift = self.pads.clamp(max=first + dropped) - self.pads.clamp(max=first)
        return shift.tolist() if bool(shift.any()) else None


class _Rotation:
    """A step's move of keys rotated at ``source`` to ``target``: the tables are built on the CPU
    once per set of rotary frequencies that asks (every layer's, or each Gemma 3 layer type's),
    and copied once to each device that asks (a model split across devices rotates each layer's
    keys on that layer's device). The copies do not wait for the device (the host memory is not
    reused while they run)."""

    def __init__(self, source: torch.Tensor, target: torch.Tensor) -> None:
        self.source, self.target = source, target
        self.tables: dict = {}  # (RopeShift, device) -> (cos, signed sin)

    def on(self, device: torch.device, rope: RopeShift) -> tuple[torch.Tensor, torch.Tensor]:
        host = torch.device("cpu")
        if (rope, host) not in self.tables:
            self.tables[rope, host] = rope.rotation(self.source, self.target)
        if (rope, device) not in self.tables:
            self.tables[rope, device] = tuple(t.to(device, non_blocking=True) for t in self.tables[rope, host])
        return self.tables[rope, device]


@dataclass
class _Step:
    n_old: int
    n_new: int
    sink_rotation: Optional[_Rotation]  # moves the sinks alone (the usual step)
    rotation: Optional[_Rotation]  # moves every key (a rebase, or the caller's new frame); the recent keys are stored moved
    dropped: int  # tokens after the sinks evicted once the step is attended
    sink_shift: Optional[list[int]]  # per row, how far its sink slots move (left-padded rows), or None


def _on_host(tensor: torch.Tensor) -> bool:
    """Whether reading ``tensor`` costs no device synchronisation."""
    return tensor.device.type == "cpu"


def _evict(x: torch.Tensor, n_sink: int, dropped: int, shift: Optional[list[int]]) -> torch.Tensor:
    """``x`` (B, kept) without the ``dropped`` entries after the first ``n_sink``; row b's first
    ``n_sink`` entries are taken ``shift[b]`` further along."""
    if not dropped:
        return x
    head = x[:, : n_sink + dropped]
    sinks = head[:, :n_sink] if shift is None else head.gather(1, torch.tensor(shift)[:, None] + torch.arange(n_sink))
    return torch.cat([sinks, x[:, n_sink + dropped :]], dim=1)


def _presented_positions(caller: torch.Tensor, n_old: int, n_keys: int) -> torch.Tensor:
    """Where attention must see the ``n_keys`` keys of each row (B, n_keys): at their index in
    the cache, moved by how far the row's positions ``caller`` (B, new) run ahead of the cache's
    (in a manual loop, by the cache's own frame, 0 to ``window``; under ``model.generate``, which
    counts each row's tokens, by the number of the row's tokens evicted so far)."""
    return caller[:, :1] - n_old + torch.arange(n_keys)
