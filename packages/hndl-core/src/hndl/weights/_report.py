"""What a load did: which checkpoint keys went where, in which layout, and what was left out."""

from __future__ import annotations

from dataclasses import dataclass

from .._errors import clip

__all__ = ["LoadReport", "Loaded"]

# How many dropped, missing or unexpected keys a printed report lists.
_LISTED = 20


@dataclass(frozen=True)
class Loaded:
    """One rule application: checkpoint keys read, model keys filled, and how.

    Attributes:
        sources: the checkpoint keys read (several when a rule joins them).
        targets: the model keys filled, each with its layout's name (``"same"``, ``"transpose"``,
            ``"rows 0..1/3"``, ``"concat dim 0"``).
        tied: model keys that share a filled tensor and were filled with it (``nodes.n_lm_head.weight`` with
            ``nodes.n_wte.weight``).
        dtype: ``"float16 -> float32"`` when the model's dtype differs from the checkpoint's (the model's is
            kept), else ``None``.
        duplicate: a checkpoint key of a tied tensor that another key already filled, checked equal and not
            copied again.
    """

    sources: tuple[str, ...]
    targets: tuple[tuple[str, str], ...]
    tied: tuple[str, ...] = ()
    dtype: str | None = None
    duplicate: bool = False

    def __str__(self) -> str:
        right = ", ".join(name if layout == "same" else f"{name} ({layout})" for name, layout in self.targets)
        notes = []
        if self.tied:
            notes.append("tied: " + ", ".join(self.tied))
        if self.dtype:
            notes.append(self.dtype)
        if self.duplicate:
            notes.append("equal to the tied tensor already loaded, not copied again")
        left = " + ".join(clip(source) for source in self.sources)
        return f"{left} -> {right}" + (f"  [{'; '.join(notes)}]" if notes else "")


@dataclass(frozen=True)
class LoadReport:
    """What :func:`hndl.load_state_dict` did. Prints as a readable list; the fields hold the same as data.

    ``missing_keys`` and ``unexpected_keys`` are what ``torch.nn.Module.load_state_dict`` returns under those
    names; both are empty after a strict load.

    Attributes:
        into: the model (``graph 'gpt2'``, ``zoo:gpt2``).
        source: the checkpoint (``'ckpt/model.safetensors'``, ``the state_dict``).
        loaded: one :class:`Loaded` per rule application, in the order they were copied.
        dropped_keys: checkpoint keys a rule dropped.
        missing_keys: model keys nothing was loaded into (kept as they were; only with ``strict=False``).
        unexpected_keys: checkpoint keys with no place in the model (not loaded; only with ``strict=False``).
    """

    into: str
    source: str
    loaded: tuple[Loaded, ...]
    dropped_keys: tuple[str, ...] = ()
    missing_keys: tuple[str, ...] = ()
    unexpected_keys: tuple[str, ...] = ()

    @property
    def model_keys(self) -> tuple[str, ...]:
        """Every model key that was filled, tied names included."""
        names = (name for item in self.loaded for name in (*(n for n, _ in item.targets), *item.tied))
        return tuple(dict.fromkeys(names))

    def __str__(self) -> str:
        read = sum(len(item.sources) for item in self.loaded)
        lines = [f"loaded {read} checkpoint keys from {self.source} into {len(self.model_keys)} keys of {self.into}:"]
        lines += [f"  {item}" for item in self.loaded]
        for title, field_name, keys in (
            ("dropped by a rule", "dropped_keys", self.dropped_keys),
            ("missing (left as they were)", "missing_keys", self.missing_keys),
            ("unexpected (not loaded)", "unexpected_keys", self.unexpected_keys),
        ):
            if keys:
                # A checkpoint's keys are not trusted: their lists are cut, each key too (the fields hold all).
                lines.append(f"{title}:")
                lines += [f"  {clip(key)}" for key in keys[:_LISTED]]
                if len(keys) > _LISTED:
                    lines.append(f"  ... and {len(keys) - _LISTED:,} more (all in report.{field_name})")
        return "\n".join(lines)
