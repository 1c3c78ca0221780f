"""slotopt inside the real PyTorch training tools: Lightning, Hugging Face Trainer, Accelerate (issue 9).

Each test compares against a hand-written loop with the same slotopt optimizer: same weights, bit for bit.
"""

import os

import pytest
import torch

import slotopt

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def data(n=32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 4, generator=g), torch.randn(n, 1, generator=g)


def net(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))


OPTIMIZERS = {
    "keras3": lambda p: slotopt.Adam(learning_rate=0.01, params=p),
    "legacy": lambda p: slotopt.legacy.RMSprop(learning_rate=0.01, params=p),
    "v1": lambda p: slotopt.v1.MomentumOptimizer(0.05, 0.9, params=p),
}


def hand_loop(make, batches, scheduler=None):
    model = net()
    opt = make(model)
    sched = scheduler(opt) if scheduler else None
    for x, y in batches:
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        if sched:
            sched.step()
    return model


class Wrapped(torch.nn.Module):
    """The MLP as a Hugging Face model: it takes the batch's fields and returns its loss."""

    def __init__(self):
        super().__init__()
        self.model = net()

    def forward(self, inputs, labels):
        return {"loss": torch.nn.functional.mse_loss(self.model(inputs), labels)}


def batches_of(x, y, size):
    return [(x[i:i + size], y[i:i + size]) for i in range(0, len(x), size)]


@pytest.mark.parametrize("kind", sorted(OPTIMIZERS))
def test_lightning_fit_equals_the_hand_written_loop(kind, tmp_path):
    import lightning.pytorch as pl

    x, y = data()

    class Module(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.model = net()

        def training_step(self, batch, _):
            return torch.nn.functional.mse_loss(self.model(batch[0]), batch[1])

        def configure_optimizers(self):
            return {"optimizer": (opt := OPTIMIZERS[kind](self.model)),
                    "lr_scheduler": torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.9)}

    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=8, shuffle=False)
    module = Module()
    trainer = pl.Trainer(max_epochs=2, accelerator="cpu", logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path)
    trainer.fit(module, loader)
    # Lightning steps the scheduler once per epoch by default.
    reference = net()
    opt = OPTIMIZERS[kind](reference)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.9)
    for _ in range(2):
        for bx, by in batches_of(x, y, 8):
            opt.zero_grad()
            torch.nn.functional.mse_loss(reference(bx), by).backward()
            opt.step()
        sched.step()
    for a, b in zip(module.model.parameters(), reference.parameters()):
        assert torch.equal(a, b)


@pytest.mark.parametrize("with_scheduler", [False, True])
@pytest.mark.parametrize("kind", ["keras3", "legacy"])
def test_hugging_face_trainer_equals_the_hand_written_loop(kind, with_scheduler, tmp_path):
    from transformers import Trainer, TrainingArguments

    x, y = data()

    class Rows(torch.utils.data.Dataset):
        def __len__(self):
            return len(x)

        def __getitem__(self, i):
            return {"inputs": x[i], "labels": y[i]}

    wrapped = Wrapped()
    opt = OPTIMIZERS[kind](wrapped.model)
    make_sched = (lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=1, gamma=0.8)) if with_scheduler else None
    sched = make_sched(opt) if make_sched else torch.optim.lr_scheduler.LambdaLR(opt, lambda _: 1.0)
    args = TrainingArguments(output_dir=str(tmp_path), per_device_train_batch_size=8, num_train_epochs=1,
                             report_to=[], save_strategy="no", logging_strategy="no", use_cpu=True,
                             dataloader_drop_last=False, max_grad_norm=0.0, seed=0,
                             train_sampling_strategy="sequential")
    trainer = Trainer(model=wrapped, args=args, train_dataset=Rows(), optimizers=(opt, sched))
    trainer.train()
    reference = hand_loop(OPTIMIZERS[kind], batches_of(x, y, 8), scheduler=make_sched)
    for a, b in zip(wrapped.model.parameters(), reference.parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_hugging_face_trainer_creates_its_scheduler_on_a_slotopt_optimizer(tmp_path):
    from transformers import Trainer, TrainingArguments

    x, y = data()

    rows = [{"inputs": a, "labels": b} for a, b in zip(x, y)]
    wrapped = Wrapped()
    opt = slotopt.Adam(learning_rate=0.01, params=wrapped.model)
    args = TrainingArguments(output_dir=str(tmp_path), per_device_train_batch_size=8, num_train_epochs=1,
                             report_to=[], save_strategy="no", logging_strategy="no", use_cpu=True,
                             max_grad_norm=0.0, lr_scheduler_type="linear", seed=0)
    trainer = Trainer(model=wrapped, args=args, train_dataset=rows, optimizers=(opt, None))
    trainer.train()
    assert int(opt.iterations) == 4
    assert opt.param_groups[0]["lr"] == 0.0  # linear decay to zero over the 4 steps


def test_accelerate_prepare_trains_like_the_hand_written_loop():
    from accelerate import Accelerator

    x, y = data()
    accelerator = Accelerator(cpu=True)
    model = net()
    opt = slotopt.legacy.Adam(learning_rate=0.01, params=model)
    model, opt = accelerator.prepare(model, opt)
    for bx, by in batches_of(x, y, 8):
        opt.zero_grad()
        accelerator.backward(torch.nn.functional.mse_loss(model(bx), by))
        opt.step()
    reference = hand_loop(lambda p: slotopt.legacy.Adam(learning_rate=0.01, params=p), batches_of(x, y, 8))
    for a, b in zip(model.parameters(), reference.parameters()):
        assert torch.equal(a, b)
