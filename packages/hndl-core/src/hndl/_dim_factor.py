"""A dim as readable text: the canonical polynomial regrouped into products where the terms allow it, exactly.

A :class:`~hndl._dims.Poly` is kept expanded (a sum of monomials), which is what makes ``==`` work, but a count
over a strided output expands badly: the multiply-adds of a 7x7 stride-2 conv over ``[B, 3, H, W]`` are
``9408*B*((H-1)//2+1)*((W-1)//2+1)``, and expanded they are
``9408*B+9408*B*((H-1)//2)+9408*B*((W-1)//2)+9408*B*((H-1)//2)*((W-1)//2)``; a ResNet stage adds several such
terms. :func:`factored_text` finds the products again: it takes the highest-degree term left, and for each floor
division ``a`` in it (to the first power) whose term without ``a`` is there ``k`` times over, makes the factor
``(a+k)``; the product is printed as one group and subtracted, until nothing is left.
The result is the same polynomial (``parse_dim(factored_text(d)) == d``), only shorter; terms that form no
product stay as they are, and a dim with no product at all prints as its canonical text.
"""

from __future__ import annotations

from itertools import combinations

from ._dims import Atom, Dim, FloorDiv, Monomial, Poly, _atom_key, _str, dim_add

__all__ = ["factored_text"]


def factored_text(d: Dim) -> str:
    """``d`` as text, with its terms grouped into products ``c*B*(X+k)*(Y+l)`` wherever that is exact."""
    if isinstance(d, int):
        return str(d)
    left = dict(d.terms)
    parts: list[str] = []
    regrouped = False
    while left:
        # The highest degree first (a product's leading term), ties in the canonical order of the terms.
        top = max(left, key=len)  # the first of the highest degree: ``left`` keeps the canonical order
        group, text, sign = _group(top, left[top], left)
        for mono, c in group.items():
            left[mono] -= c
            if left[mono] == 0:
                del left[mono]
        parts.append(("-" if sign < 0 else "+" if parts else "") + text)
        regrouped = regrouped or len(group) > 1
    # Nothing to regroup: the canonical text, in its order, as everywhere else dims are printed.
    return "".join(parts) if regrouped else _str(d)


def _group(top: Monomial, coeff: int, left: dict[Monomial, int]) -> tuple[dict[Monomial, int], str, int]:
    """The largest product ``coeff*base*(a1+k1)*...`` with leading term ``coeff*top`` that ``left`` holds
    (every term of it there, with the same sign and at least its size): its terms, its text, its sign."""
    factors: dict[Atom, int] = {}
    for atom in sorted(set(top), key=_atom_key):
        # Only floor divisions: they are what an output size (H-1)//2+1 leaves in a count. A symbol's factor
        # would be an accident of the sum (128*B*S*T+121344*B*T is not a product with meaning, 128*B*T*(S+948)),
        # and a power (T*T) stays a power.
        if not isinstance(atom, FloorDiv) or top.count(atom) != 1:
            continue
        below = left.get(_without(top, atom), 0)
        if below == 0 or below % coeff or below // coeff <= 0:
            continue
        trial = {**factors, atom: below // coeff}
        terms = _expand(top, coeff, trial)
        if all(_holds(left.get(m, 0), c) for m, c in terms.items()):
            factors = trial
    terms = _expand(top, coeff, factors)
    if not factors:  # the term alone, as the canonical text writes it
        return terms, _str(Poly(((top, abs(coeff)),))), coeff
    base = top
    for atom in factors:
        base = _without(base, atom)
    # A floor division next to another factor needs parentheses: 2*(H//2) is not (2*H)//2.
    pieces = [a if isinstance(a, str) else f"({a})" for a in base]
    pieces += [f"({_str(dim_add(Poly((((atom,), 1),)), k))})" for atom, k in factors.items()]
    if abs(coeff) != 1:
        pieces.insert(0, str(abs(coeff)))
    if len(pieces) == 1 and coeff > 0:  # a lone (a+k) added to the rest needs no parentheses
        return terms, pieces[0][1:-1], coeff
    return terms, "*".join(pieces), coeff


def _without(mono: Monomial, atom: Atom) -> Monomial:
    i = mono.index(atom)
    return mono[:i] + mono[i + 1 :]


def _expand(top: Monomial, coeff: int, factors: dict[Atom, int]) -> dict[Monomial, int]:
    """The terms of ``coeff*top`` with each atom ``a`` of ``factors`` replaced by ``(a+k)``."""
    out: dict[Monomial, int] = {}
    atoms = list(factors)
    for n in range(len(atoms) + 1):
        for dropped in combinations(atoms, n):
            mono, c = top, coeff
            for atom in dropped:
                mono, c = _without(mono, atom), c * factors[atom]
            out[mono] = out.get(mono, 0) + c
    return out


def _holds(have: int, need: int) -> bool:
    return have != 0 and (have > 0) == (need > 0) and abs(have) >= abs(need)
