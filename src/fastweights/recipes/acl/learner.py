"""A metalearned ACL model as a continual learner of your own images (ACL paper: Irie, Csordás &
Schmidhuber, *Metalearning Continual Learning Algorithms*, TMLR 2025).

The model learns *in context* (§3): demonstrations (image, label) are read one after another by its
sequence layers, whose state — the fast weights of the self-referential weight matrices — is the only
thing that changes; the slow weights (the parameters, meta-trained by ACL) never do. A prediction is a
query: the image with the "unknown" label, read from the fast weights without writing into them (§3;
the read-only queries of the split-benchmark evaluation, §4.3). :class:`ContinualLearner` wraps this:
``learn`` a batch of demonstrations any number of times, ``predict`` labels, ``reset`` to the slow
weights, save and restore the fast weights (safetensors).

Images take the evaluation's path into the model: resized to ``data.image_size`` by the data loaders'
resize (:func:`fastweights.data.images.dataset_images`), normalised with pixel statistics and, when
grayscale for an RGB backbone, repeated to 3 channels
(:class:`fastweights.cl.split_protocol.ImageEmbedder`); queries are read as the split benchmarks read
them (:func:`fastweights.cl.split_protocol.read_queries`). A stream of tasks fed task by task gives the
numbers of :func:`fastweights.cl.split_protocol.evaluate_split_tasks` (``fastweights acl stream``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch
from torch import Tensor

from fastweights.checks import check_choice, check_device
from fastweights.cl.split_protocol import ImageEmbedder, read_queries
from fastweights.data.images import dataset_images, is_grayscale, uint8_images
from fastweights.data.sources.base import Stat, image_stats
from fastweights.io import atomic_write_bytes
from fastweights.models.in_context import InContextClassifier
from fastweights.recipes.acl.config import ACLConfig
from fastweights.train.modes import eval_mode

__all__ = ["ContinualLearner", "Prediction", "STATE_FORMAT"]

#: the ``format`` entry of a learner state (``state_dict``, ``save_state``)
STATE_FORMAT = "fastweights.acl.ContinualLearner/1"
_META_KEY = "fastweights"  # the safetensors metadata entry holding the state's JSON fields


class Prediction(NamedTuple):
    """What :meth:`ContinualLearner.predict` returns (a tuple: ``labels, probs = learner.predict(x)``).

    ``labels``: int64 ``[N]`` on the CPU, the predicted label of every image. ``probs``: float32
    ``[N, num_classes]`` on the CPU, column ``c`` = the probability of label ``c`` (a softmax over the
    candidate labels' logits; 0 for every other label), each row summing to 1.
    """

    labels: Tensor
    probs: Tensor


def _weights_sha256(model: torch.nn.Module) -> str:
    """SHA-256 of the model's parameters and buffers (names, dtypes, shapes, bytes): which slow weights
    a fast-weight state belongs to."""
    digest = hashlib.sha256()
    for name, value in model.state_dict().items():
        t = value.detach().to("cpu").contiguous()
        digest.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        digest.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def _flatten(obj: Any, prefix: str, out: dict[str, Tensor]) -> Any:
    """A sequence-layer state (tensors in tuples, lists and dicts, ``None``, numbers) → its JSON outline,
    the tensors put into ``out`` (CPU copies) under dotted names."""
    if isinstance(obj, Tensor):
        out[prefix] = obj.detach().to("cpu").clone().contiguous()
        return {"tensor": prefix}
    if obj is None:
        return {"none": True}
    if isinstance(obj, tuple | list):
        kind = "tuple" if isinstance(obj, tuple) else "list"
        return {kind: [_flatten(v, f"{prefix}.{i}", out) for i, v in enumerate(obj)]}
    if isinstance(obj, dict) and all(isinstance(k, str) for k in obj):
        return {"dict": {k: _flatten(v, f"{prefix}.{k}", out) for k, v in obj.items()}}
    if isinstance(obj, bool | int | float):
        return {"value": obj}
    raise ValueError(f"state: cannot store a {type(obj).__name__} of the sequence-layer state at {prefix}")


def _unflatten(spec: Any, tensors: dict[str, Tensor], device: torch.device, where: str) -> Any:
    """Inverse of :func:`_flatten` (tensors moved to ``device``). Raises ValueError naming ``where``."""
    if not isinstance(spec, dict) or len(spec) != 1:
        raise ValueError(f"{where}: damaged state outline (expected one entry per value, given {spec!r:.80})")
    ((kind, value),) = spec.items()
    if kind == "tensor":
        if value not in tensors:
            raise ValueError(f"{where}: the state names a tensor {value!r} it does not hold")
        return tensors[value].to(device)
    if kind == "none":
        return None
    if kind in ("tuple", "list") and isinstance(value, list):
        items = [_unflatten(v, tensors, device, where) for v in value]
        return tuple(items) if kind == "tuple" else items
    if kind == "dict" and isinstance(value, dict):
        return {k: _unflatten(v, tensors, device, where) for k, v in value.items()}
    if kind == "value" and isinstance(value, bool | int | float):
        return value
    raise ValueError(f"{where}: damaged state outline (unknown entry {kind!r})")


def _outline(spec: Any, tensors: dict[str, Tensor]) -> Any:
    """A state outline with every tensor replaced by its dtype and number of dimensions (what two states
    of one model share, whatever they have read)."""
    if isinstance(spec, dict) and len(spec) == 1:
        ((kind, value),) = spec.items()
        if kind == "tensor":
            t = tensors.get(value)
            return None if t is None else (str(t.dtype), t.dim())
        if kind in ("tuple", "list"):
            return (kind, [_outline(v, tensors) for v in value])
        if kind == "dict":
            return ("dict", {k: _outline(v, tensors) for k, v in value.items()})
        return (kind, None if kind != "value" else type(value).__name__)
    return None


def _check_stat(name: str, value: Any, channels: int) -> Stat:
    """A pixel statistic of images / 255 as the containers keep it: a float (grayscale) or 3 floats (RGB;
    one value is used for every channel)."""
    items = list(value) if isinstance(value, Sequence | np.ndarray | Tensor) and np.ndim(value) else [value]
    try:
        floats = [float(v) for v in items]
    except (TypeError, ValueError):
        floats = []
    ok = len(floats) in (1, channels) and all(np.isfinite(v) for v in floats)
    if ok and name == "std":
        ok = all(v > 0 for v in floats)
    if not ok:
        rule = "finite number" + (" > 0" if name == "std" else "")
        many = f" or {channels} of them (one per channel)" if channels > 1 else ""
        raise ValueError(f"{name}: expected a {rule}{many} (statistics of pixels / 255), given {value!r}")
    if channels == 1:
        return floats[0]
    return tuple(floats) if len(floats) == channels else (floats[0],) * channels


class ContinualLearner:
    """An ACL model learning your images in context: the fast weights change, the slow weights never do.

    ``learn(images, labels)`` feeds a batch of demonstrations as the model's in-context demonstration
    sequence, in the order given (how the evaluation feeds a task's demonstrations: one call of the
    sequence part from the state reached so far, ACL paper §3 and §4.3); call it any number of times,
    e.g. once per task. ``predict(images)`` reads the label of each image from the current state without
    changing it (queries are read-only, §3). ``reset()`` returns to the slow weights. The state —
    fast weights, the labels learned and the pixel statistics — is ``state_dict()`` /
    ``load_state_dict()``, or a safetensors file with ``save_state(path)`` / ``load_state(path)``.
    Every call runs without gradients in eval mode; the parameters are never written.

    Labels (:attr:`scenario`, :attr:`label_space`, :attr:`label_meaning`):

    - a **class-incremental** model (``train.scenario: class``, e.g. ``pretrained/acl-5task-class``)
      gives every class of the whole stream its own label ``0..label_space-1`` (``label_space`` =
      ``model.num_classes`` unless ``train.label_space`` says less): use new labels for the classes of a
      new task.
    - a **domain-incremental** model (``train.scenario: domain``, e.g. ``pretrained/acl-5task-domain``,
      ``pretrained/acl-cross``) labels the classes of *each task* ``0..label_space-1`` (``label_space`` =
      ``train.n_way``, or ``train.label_space``): label ``c`` means "the c-th class of the task", every
      task uses the same labels, and a prediction says which position in its task an image's class has.

    Predictions choose among the labels learned so far (:attr:`labels_seen`); the split-benchmark
    evaluation instead compares the logits of every label of its stream from the first task on, which
    ``predict(images, candidates=n)`` does (``acl stream`` uses it). A label outside
    ``[0, label_space)`` is a ``ValueError`` naming it, the range and what labels mean.

    Images: PIL images, numpy arrays or torch tensors (uint8, other integers in [0, 255], floats in
    [0, 1]), one image or a batch, grayscale or RGB, any size (see
    :func:`fastweights.data.images.uint8_images` for how shapes are read; a ``[3, H, W]`` array is one
    RGB image — pass a list for three grayscale ones). Each image is resized to the model's
    :attr:`image_size` as the data loaders resize; for a 1-channel model RGB images become grayscale.
    For an RGB model the colour mode of a stream (:attr:`channels`) is grayscale when the first
    ``learn`` batch is all grayscale (as the grayscale split benchmarks are fed: normalised, then repeated
    to 3 channels) and RGB otherwise; later images are converted to it. Pixel statistics (:attr:`mean`,
    :attr:`std`, of pixels / 255): given, or those of the first ``learn`` batch (the evaluation normalises
    a benchmark with the statistics of its data), then fixed until :meth:`reset`.

    Use :meth:`from_pretrained` for a run or export folder. ``ContinualLearner(model, config)`` wraps a
    model in memory (an ``acl`` :class:`~fastweights.models.in_context.InContextClassifier` and its
    :class:`~fastweights.recipes.acl.config.ACLConfig`).

    Args:
        model: the trained model (Conv-4 backbone); put on ``device``.
        config: its config (``train.scenario``, ``train.n_way``, ``train.label_space``,
            ``data.image_size``).
        device: where the model runs (default: where its parameters are).
        mean, std: pixel statistics of images / 255 (default: from the first ``learn`` batch); both or
            neither: a float each for grayscale, or 3 floats each for RGB (a float with ``channels=3`` is
            used for every channel; without ``channels``, floats mean grayscale and 3 floats RGB).
        channels: the colour mode, 1 (grayscale) or 3 (RGB; an RGB model only); default as above.

    Raises:
        ValueError: for a frozen-encoder model (``model.backbone: frozen:…``: it reads features, not
            images), only one of ``mean`` / ``std``, bad statistics, or a bad ``channels``.
    """

    source: Path | None = None  #: the folder :meth:`from_pretrained` loaded (None otherwise)
    step: int | None = None  #: the meta-training step of the checkpoint :meth:`from_pretrained` loaded

    def __init__(
        self,
        model: InContextClassifier,
        config: ACLConfig,
        *,
        device: torch.device | str | None = None,
        mean: float | Sequence[float] | None = None,
        std: float | Sequence[float] | None = None,
        channels: int | None = None,
    ) -> None:
        if not isinstance(model, InContextClassifier) or not isinstance(config, ACLConfig):
            raise ValueError(
                "model, config: expected an InContextClassifier and its ACLConfig (or use "
                f"ContinualLearner.from_pretrained), given {type(model).__name__}, {type(config).__name__}"
            )
        if config.model.backbone != "conv4":
            raise ValueError(
                "model.backbone: expected 'conv4' (a model that reads images), given "
                f"{config.model.backbone!r}: a frozen encoder's model reads the encoder's features, which "
                "ContinualLearner does not make"
            )
        self.model = model
        self.config = config
        self.device = torch.device(device) if device is not None else next(model.parameters()).device
        self.model.to(self.device).eval()
        #: ``"class"`` or ``"domain"``: the model's ``train.scenario``
        self.scenario: str = config.train.scenario
        #: the model's outputs (``model.num_classes``)
        self.num_classes: int = model.num_classes
        t = config.train
        space = (
            (t.label_space or model.num_classes) if self.scenario == "class" else (t.label_space or t.n_way)
        )
        #: labels are ``0..label_space-1``
        self.label_space: int = min(int(space), model.num_classes)
        #: the image size the model reads (``data.image_size``)
        self.image_size: int = int(config.data.image_size)
        #: the backbone's input channels (``data.channels``)
        self.model_channels: int = int(getattr(model.backbone, "in_channels", config.data.channels))
        #: what a label means for this model, in words
        self.label_meaning: str = (
            f"class-incremental: one label per class of the whole stream, 0..{self.label_space - 1} (the "
            f"model's {self.label_space} outputs); give the classes of a new task new labels"
            if self.scenario == "class"
            else f"domain-incremental: labels 0..{self.label_space - 1} number the classes within each task "
            "(label c = the task's c-th class); every task reuses them"
        )
        if (mean is None) != (std is None):
            raise ValueError("mean, std: expected both (pixel statistics of images / 255) or neither")
        if channels is not None and channels not in ((1,) if self.model_channels == 1 else (1, 3)):
            allowed = "1 (the model is grayscale)" if self.model_channels == 1 else "1 (grayscale) or 3 (RGB)"
            raise ValueError(f"channels: expected {allowed}, given {channels!r}")
        self._given_channels = 1 if self.model_channels == 1 else channels
        self._given_stats: tuple[Stat, Stat] | None = None
        if mean is not None:
            c = self._given_channels or (3 if np.ndim(mean) or np.ndim(std) else 1)
            if self._given_channels is None:
                self._given_channels = c
            self._given_stats = (_check_stat("mean", mean, c), _check_stat("std", std, c))
        self._weights_sha256 = _weights_sha256(model)
        self.reset()

    @classmethod
    def from_pretrained(
        cls,
        path: str | Path,
        *,
        device: str = "auto",
        checkpoint: str = "best",
        mean: float | Sequence[float] | None = None,
        std: float | Sequence[float] | None = None,
        channels: int | None = None,
    ) -> ContinualLearner:
        """The learner of a trained ACL model: a run folder (``config.yaml`` + ``checkpoints/``) or an
        export folder, loaded by :func:`fastweights.recipes.run.load_trained` (the process's torch threads
        are left as they were).

        Args:
            path: the folder, e.g. ``"pretrained/acl-5task-class"``.
            device: ``"auto"`` (CUDA when available), ``"cpu"``, ``"cuda"`` or ``"cuda:N"``.
            checkpoint: ``"best"`` or ``"latest"``.
            mean, std, channels: as for the constructor.

        Raises:
            FileNotFoundError: no such folder, config or checkpoint.
            ValueError: a bad ``device`` / ``checkpoint``, CUDA asked for without a GPU, a damaged
                checkpoint, a config of another recipe, or as for the constructor.
        """
        from fastweights.recipes.acl import build_model
        from fastweights.recipes.run import load_trained

        check_device("device", device)
        check_choice("checkpoint", checkpoint, ("best", "latest"))
        threads = torch.get_num_threads()
        try:
            cfg, state, model, dev = load_trained(
                Path(path), ACLConfig, build_model, checkpoint, [f"device={device}"]
            )
        finally:
            torch.set_num_threads(threads)
        learner = cls(model, cfg, device=dev, mean=mean, std=std, channels=channels)
        learner.source = Path(path)
        learner.step = state.get("step")
        return learner

    # --- what the learner holds ----------------------------------------------------------------------

    @property
    def labels_seen(self) -> tuple[int, ...]:
        """The labels of every demonstration learned since the last :meth:`reset`, ascending."""
        return tuple(sorted(self._seen))

    @property
    def num_demonstrations(self) -> int:
        """Demonstrations learned since the last :meth:`reset`."""
        return self._demos

    @property
    def channels(self) -> int | None:
        """The stream's colour mode (1 grayscale, 3 RGB); None until given or set by the first ``learn``."""
        return self._channels

    @property
    def mean(self) -> Stat | None:
        """Pixel mean of images / 255 (a float, or 3 floats for RGB); None until given or learned."""
        return self._mean

    @property
    def std(self) -> Stat | None:
        """Pixel standard deviation of images / 255, as :attr:`mean`."""
        return self._std

    @property
    def fast_weights(self) -> tuple[Any, ...] | None:
        """The sequence layers' state (one entry per layer; for the SRWM the fast weight matrices
        ``[1, H, E, 3E+4]``), or None at the slow weights. The learner's own tensors: do not modify."""
        return self._state

    def __repr__(self) -> str:
        where = f"{self.source}, " if self.source is not None else ""
        return (
            f"ContinualLearner({where}{self.scenario}-incremental, labels 0..{self.label_space - 1}, "
            f"{self._demos} demonstrations learned, labels seen {list(self.labels_seen)}, "
            f"device {self.device})"
        )

    def reset(self) -> None:
        """Back to the slow weights: no demonstration learned; statistics and colour mode not given to
        the constructor are taken again from the next ``learn``."""
        self._state: tuple[Any, ...] | None = None
        self._seen: set[int] = set()
        self._demos = 0
        self._channels: int | None = self._given_channels
        self._mean, self._std = self._given_stats if self._given_stats is not None else (None, None)

    # --- learning and predicting ---------------------------------------------------------------------

    def _labels(self, labels: Any, n: int) -> Tensor:
        arr = labels.detach().to("cpu").numpy() if isinstance(labels, Tensor) else np.asarray(labels)
        if arr.ndim == 0:
            arr = arr.reshape(1)
        if arr.ndim != 1 or not np.issubdtype(arr.dtype, np.integer):
            raise ValueError(
                f"labels: expected one integer label per image (an int, a list, an integer array or tensor), "
                f"given {'dtype ' + str(arr.dtype) if arr.ndim == 1 else f'{arr.ndim}-D values'}"
            )
        if len(arr) != n:
            raise ValueError(
                f"labels: expected one label per image ({n} image{'s' if n != 1 else ''} read), given "
                f"{len(arr)} labels (a 3-D array [3, H, W] or [H, W, 3] is one RGB image; pass a list or a "
                "stack [N, H, W] for grayscale images)"
            )
        bad = arr[(arr < 0) | (arr >= self.label_space)]
        if bad.size:
            raise ValueError(
                f"labels: {int(bad[0])} is outside the allowed range [0, {self.label_space}) "
                f"({self.label_meaning})"
            )
        return torch.from_numpy(arr.astype(np.int64))

    def _inputs(self, images: Any, what: str) -> tuple[np.ndarray, int, Stat, Stat]:
        """The images in the data sets' form and the colour mode and statistics they are read with."""
        arrays = uint8_images(images, what)
        channels = self._channels
        if channels is None:
            channels = 1 if all(is_grayscale(a) for a in arrays) else 3
        data = dataset_images(arrays, size=self.image_size, channels=channels)
        if self._mean is not None and self._std is not None:
            mean, std = self._mean, self._std
        else:
            mean, std = image_stats(data, channels)
        return data, channels, mean, std

    def _features(self, data: np.ndarray, channels: int, mean: Stat, std: Stat) -> Tensor:
        return ImageEmbedder(self.model, mean, std, channels, self.device)(data)

    @torch.no_grad()
    def learn(self, images: Any, labels: Any) -> None:
        """Learn a batch of demonstrations: ``images[i]`` has label ``labels[i]``, read in that order from
        the state reached so far (the fast weights change, the slow weights do not; ACL paper §3).

        Args:
            images: ``N >= 1`` images (one image, a stack or a list; see the class docstring).
            labels: ``N`` integer labels in ``[0, label_space)`` (an int for one image, a list, an integer
                numpy array or tensor).

        Raises:
            ValueError: for unreadable images (type, shape, pixel range), no images, a label count that is
                not the image count, non-integer labels or a label outside ``[0, label_space)`` (the message
                names the label, the range and what labels mean for this model). Nothing is learned then.
        """
        data, channels, mean, std = self._inputs(images, "images")
        if len(data) == 0:
            raise ValueError("images: expected at least one demonstration, given none")
        y = self._labels(labels, len(data))
        feats = self._features(data, channels, mean, std)
        with eval_mode(self.model):
            _, state = self.model.forward_features(
                feats.unsqueeze(0), y.to(self.device).unsqueeze(0), self._state
            )
        self._state, self._channels, self._mean, self._std = state, channels, mean, std
        self._seen.update(int(v) for v in y.tolist())
        self._demos += len(y)

    def _candidates(self, candidates: int | Sequence[int] | None) -> list[int]:
        if candidates is None:
            if not self._seen:
                raise ValueError(
                    "predict: nothing learned yet (call learn first, or pass candidates= to read the slow "
                    "weights)"
                )
            return sorted(self._seen)
        if isinstance(candidates, int | np.integer) and not isinstance(candidates, bool):
            if not 1 <= int(candidates) <= self.label_space:
                raise ValueError(
                    f"candidates: expected a number of labels in [1, {self.label_space}], given {candidates}"
                )
            return list(range(int(candidates)))
        values = np.asarray(candidates.tolist() if isinstance(candidates, Tensor) else candidates)
        if values.ndim != 1 or values.size == 0 or not np.issubdtype(values.dtype, np.integer):
            raise ValueError(
                "candidates: expected a number of labels or a non-empty sequence of integer labels, given "
                f"{candidates!r:.80}"
            )
        bad = values[(values < 0) | (values >= self.label_space)]
        if bad.size:
            raise ValueError(
                f"candidates: {int(bad[0])} is outside the allowed range [0, {self.label_space}) "
                f"({self.label_meaning})"
            )
        return sorted({int(v) for v in values})

    @torch.no_grad()
    def predict(self, images: Any, *, candidates: int | Sequence[int] | None = None) -> Prediction:
        """Predict the label of every image from the current state, without changing it: each image is an
        independent read-only query (the "unknown" label; ACL paper §3), read as the split benchmarks
        read their queries (:func:`~fastweights.cl.split_protocol.read_queries`).

        Args:
            images: any number of images (see the class docstring).
            candidates: the labels to choose among: default the labels learned so far
                (:attr:`labels_seen`); ``n`` = labels ``0..n-1`` (the evaluation's rule: the argmax over
                the first ``n`` logits, ``n`` = the labels of its whole stream); or a sequence of labels.

        Returns:
            :class:`Prediction`: ``labels`` int64 ``[N]`` and ``probs`` float32 ``[N, num_classes]`` (CPU).

        Raises:
            ValueError: for unreadable images, nothing learned yet without ``candidates``, or candidates
                outside ``[0, label_space)``.
        """
        cand = self._candidates(candidates)
        data, channels, mean, std = self._inputs(images, "images")
        probs = torch.zeros((len(data), self.num_classes), dtype=torch.float32)
        if len(data) == 0:
            return Prediction(torch.zeros(0, dtype=torch.long), probs)
        feats = self._features(data, channels, mean, std)
        with eval_mode(self.model):
            logits = read_queries(self.model, feats, self._state)
        index = torch.tensor(cand, dtype=torch.long, device=logits.device)
        chosen = logits.index_select(1, index)
        labels = index[chosen.argmax(-1)].to("cpu")
        probs[:, index.to("cpu")] = torch.softmax(chosen.float(), dim=-1).to("cpu")
        return Prediction(labels, probs)

    # --- the state -----------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """The learner's state (CPU copies): ``fast_weights`` (name → tensor), ``layout`` (how they form
        the sequence layers' state), ``labels_seen``, ``demonstrations``, ``channels``, ``mean``, ``std``,
        ``format`` and ``weights_sha256`` (the slow weights it belongs to)."""
        tensors: dict[str, Tensor] = {}
        layout = None if self._state is None else _flatten(tuple(self._state), "layers", tensors)
        return {
            "format": STATE_FORMAT,
            "weights_sha256": self._weights_sha256,
            "fast_weights": tensors,
            "layout": layout,
            "labels_seen": list(self.labels_seen),
            "demonstrations": self._demos,
            "channels": self._channels,
            "mean": list(self._mean) if isinstance(self._mean, tuple) else self._mean,
            "std": list(self._std) if isinstance(self._std, tuple) else self._std,
        }

    def load_state_dict(self, state: dict[str, Any], *, where: str = "state") -> None:
        """Restore a :meth:`state_dict` of a learner of the same model (the same slow weights): its fast
        weights, labels, colour mode and statistics replace the learner's.

        Raises:
            ValueError: naming ``where`` for another format, a state of other slow weights, or damaged
                fields; the learner is unchanged then.
        """
        if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
            got = state.get("format") if isinstance(state, dict) else type(state).__name__
            raise ValueError(
                f"{where}: expected a ContinualLearner state ({STATE_FORMAT!r}), given {got!r:.80}"
            )
        if state.get("weights_sha256") != self._weights_sha256:
            raise ValueError(
                f"{where}: the state belongs to other slow weights (weights_sha256 "
                f"{str(state.get('weights_sha256'))[:12]}…, this model's {self._weights_sha256[:12]}…): load "
                "it into a learner of the model it was made with"
            )
        tensors = state.get("fast_weights")
        if not isinstance(tensors, dict) or not all(isinstance(t, Tensor) for t in tensors.values()):
            raise ValueError(f"{where}: fast_weights: expected a dict of tensors")
        layout = state.get("layout")
        fast = None if layout is None else _unflatten(layout, tensors, self.device, where)
        if fast is not None:
            if not isinstance(fast, tuple) or len(fast) != len(self.model.seq_layers):
                raise ValueError(
                    f"{where}: expected one state per sequence layer ({len(self.model.seq_layers)})"
                )
            probe: dict[str, Tensor] = {}
            with torch.no_grad(), eval_mode(self.model):
                feats = torch.zeros(
                    (1, 1, self.model.backbone.feature_dim),
                    device=self.device,
                    dtype=next(self.model.parameters()).dtype,
                )
                _, made = self.model.forward_features(
                    feats, torch.zeros((1, 1), dtype=torch.long, device=self.device)
                )
            expected = _outline(_flatten(tuple(made), "layers", probe), probe)
            if _outline(layout, tensors) != expected:
                raise ValueError(f"{where}: the fast weights do not have this model's layout")
        seen = state.get("labels_seen")
        if not isinstance(seen, list) or not all(
            isinstance(v, int) and not isinstance(v, bool) and 0 <= v < self.label_space for v in seen
        ):
            raise ValueError(
                f"{where}: labels_seen: expected labels in [0, {self.label_space}), given {seen!r:.80}"
            )
        demos, channels = state.get("demonstrations"), state.get("channels")
        if not isinstance(demos, int) or demos < 0:
            raise ValueError(f"{where}: demonstrations: expected a count >= 0, given {demos!r}")
        if channels not in (None, 1, 3) or (channels == 3 and self.model_channels == 1):
            raise ValueError(f"{where}: channels: expected 1, 3 or None, given {channels!r}")
        mean = std = None
        if state.get("mean") is not None or state.get("std") is not None:
            if channels is None:
                raise ValueError(f"{where}: mean/std without channels")
            mean, std = (
                _check_stat("mean", state.get("mean"), channels),
                _check_stat("std", state.get("std"), channels),
            )
        self._state = fast
        self._seen, self._demos, self._channels = set(seen), demos, channels
        self._mean, self._std = mean, std

    def save_state(self, path: str | Path) -> Path:
        """Write :meth:`state_dict` as a safetensors file (the tensors, and the other fields as JSON in
        its metadata), atomically; returns the path.

        Raises:
            OSError: naming the file when it cannot be written (an older file is left intact).
        """
        from safetensors.torch import save

        state = self.state_dict()
        tensors = state.pop("fast_weights")
        data = save(tensors, metadata={_META_KEY: json.dumps(state)})
        atomic_write_bytes(Path(path), data)
        return Path(path)

    def load_state(self, path: str | Path) -> None:
        """Read a :meth:`save_state` file into this learner (a file read only: no code runs, as safetensors
        holds tensors and text).

        Raises:
            FileNotFoundError: naming the path when there is no such file.
            ValueError: naming the path for a file that is not such a state (damaged, another model's).
        """
        from safetensors import safe_open

        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no such file; expected a learner state written by save_state")
        try:
            with safe_open(str(path), framework="pt", device="cpu") as f:
                meta = f.metadata() or {}
                tensors = {k: f.get_tensor(k) for k in f.keys()}
            state = json.loads(meta[_META_KEY])
        except Exception as err:  # SafetensorError, a missing or non-JSON entry: one line naming the file
            first = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
            raise ValueError(
                f"{path}: damaged or not a learner state (expected a safetensors file written by "
                f"ContinualLearner.save_state; {type(err).__name__}: {first})"
            ) from None
        if not isinstance(state, dict):
            raise ValueError(f"{path}: damaged learner state (its metadata is not a JSON object)")
        self.load_state_dict({**state, "fast_weights": tensors}, where=str(path))
