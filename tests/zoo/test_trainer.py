"""HF ``Trainer`` trains a built zoo model as it is, with no wrapper module (issue 36).

Trainer keeps only the dataset columns ``inspect.signature(model.forward)`` names (plus ``label_names``); with
``forward(*args, **kwargs)`` it dropped them all ("The batch received was empty"). The model returns logits, so
the loss goes through ``compute_loss_func``. Needs transformers and accelerate (the ``reference`` nox session).
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch.nn import functional as F

pytest.importorskip("accelerate")
transformers = pytest.importorskip("transformers")

import hndl  # noqa: E402

STEPS = 5
LR = 1e-3


def rows() -> list[dict[str, list[int]]]:
    """Two tokenized rows as a tokenizer gives them: int ids, a 0/1 attention_mask (right padding), labels with
    -100 at the padding."""
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 256, (2, 8), generator=generator)
    mask = torch.ones(2, 8, dtype=torch.long)
    mask[1, 6:] = 0
    labels = ids.masked_fill(mask == 0, -100)
    return [
        {"input_ids": i.tolist(), "attention_mask": m.tolist(), "labels": y.tolist()}
        for i, m, y in zip(ids, mask, labels)
    ]


def collate(features: list[dict[str, list[int]]]) -> dict[str, torch.Tensor]:
    """Rows to tensors; the 0/1 mask becomes the bool mask the model's contract asks for."""
    batch = {key: torch.tensor([f[key] for f in features]) for key in features[0]}
    batch["attention_mask"] = batch["attention_mask"].bool()
    return batch


def causal_lm_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Position i predicts token i + 1; padding (-100) is ignored; the mean over the predicted tokens."""
    return F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), labels[:, 1:].flatten(), ignore_index=-100)


def trainer_losses(model: torch.nn.Module, tmp_path) -> list[float]:
    seen: list[float] = []

    def compute_loss(outputs, labels, num_items_in_batch=None):
        loss = causal_lm_loss(outputs, labels)
        seen.append(loss.item())
        return loss

    args = transformers.TrainingArguments(
        output_dir=str(tmp_path),
        per_device_train_batch_size=2,
        max_steps=STEPS,
        learning_rate=LR,
        lr_scheduler_type="constant",
        optim="adamw_torch",
        weight_decay=0.0,
        max_grad_norm=0.0,
        label_names=["labels"],  # kept beside the columns forward names; the loss reads it
        train_sampling_strategy="sequential",
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        seed=0,
    )
    trainer = transformers.Trainer(
        model=model, args=args, train_dataset=rows(), data_collator=collate, compute_loss_func=compute_loss
    )
    trainer.train()
    return seen


def hand_losses(model: torch.nn.Module) -> list[float]:
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.0)
    batch = collate(rows())
    labels = batch.pop("labels")
    model.train()
    losses = []
    for _ in range(STEPS):
        optimizer.zero_grad()
        loss = causal_lm_loss(model(**batch), labels)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def test_trainer_batch_was_empty_with_args_kwargs_forward_and_now_trains_as_a_hand_loop(tmp_path):
    torch.manual_seed(0)
    model = hndl.build(hndl.zoo.get("llama"))
    twin = copy.deepcopy(model)
    got = trainer_losses(model, tmp_path)
    want = hand_losses(twin)
    assert len(got) == STEPS
    assert got == want  # the same batches, optimizer and loss: the same numbers
    assert got[-1] < got[0]
    for a, b in zip(model.state_dict().values(), twin.state_dict().values()):
        assert torch.equal(a, b)


def test_tokenizer_int_attention_mask_is_refused_with_what_to_do(tmp_path):
    model = hndl.build(hndl.zoo.get("llama"))
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path), per_device_train_batch_size=2, max_steps=1, label_names=["labels"],
        save_strategy="no", report_to="none", use_cpu=True,
    )  # fmt: skip
    trainer = transformers.Trainer(
        model=model,
        args=args,
        train_dataset=rows(),  # the default collator keeps the int64 0/1 mask
        compute_loss_func=lambda outputs, labels, num_items_in_batch=None: causal_lm_loss(outputs, labels),
    )
    with pytest.raises(hndl.HndlError) as info:
        trainer.train()
    assert info.value.code == "E_INPUT"
    assert "attention_mask" in str(info.value)
    assert "attention_mask.bool()" in str(info.value)


def test_trainer_does_not_pass_num_items_in_batch_and_a_direct_one_is_e_input(tmp_path):
    model = hndl.build(hndl.zoo.get("llama"))
    trainer = transformers.Trainer(
        model=model,
        args=transformers.TrainingArguments(output_dir=str(tmp_path), report_to="none", use_cpu=True),
    )
    assert trainer.model_accepts_loss_kwargs is False  # no **kwargs: Trainer keeps num_items_in_batch for the loss
    batch = collate(rows())
    with pytest.raises(hndl.HndlError) as info:
        model(batch["input_ids"], batch["attention_mask"], num_items_in_batch=4)
    assert info.value.code == "E_INPUT"
    assert "num_items_in_batch" in str(info.value)
