"""Turn a standard classification dataset into few-shot class pools (e.g. Fashion-MNIST's 10 classes as
the second domain of the sequential multi-task recipe)."""

from __future__ import annotations

import numpy as np

from .sources.base import ClassPool, LabeledImages, SplitDataset

__all__ = ["class_pool", "split_dataset_pools"]


def class_pool(name: str, images: LabeledImages, num_classes: int, mean, std) -> ClassPool:
    """All ``num_classes`` classes of ``images`` as a :class:`ClassPool` with ``M`` = the smallest
    class count examples each (the first ``M`` of every class, in dataset order).

    Raises:
        ValueError: if a class has no example.
    """
    counts = np.bincount(images.labels, minlength=num_classes)
    if counts.min() == 0:
        raise ValueError(
            f"images: expected every class 0..{num_classes - 1} present, given counts {counts.tolist()}"
        )
    m = int(counts.min())
    per_class = [images.images[images.labels == c][:m] for c in range(num_classes)]
    names = [f"{name}/{c}" for c in range(num_classes)]
    return ClassPool(name, np.stack(per_class), names, [name] * num_classes, mean, std)


def split_dataset_pools(dataset: SplitDataset, *, val_fraction: float = 1 / 6) -> dict[str, ClassPool]:
    """``{"train", "val", "test"}`` pools over the same classes: the train split's examples divided
    into train (first ``1 - val_fraction`` of each class) and val (the rest); test = the test split.

    Raises:
        ValueError: if ``val_fraction`` is not in (0, 1).
    """
    if not 0.0 < val_fraction < 1.0:
        raise ValueError(f"val_fraction: expected a float in (0, 1), given {val_fraction!r}")
    full = class_pool(dataset.name, dataset.train, dataset.num_classes, dataset.mean, dataset.std)
    cut = int(round(full.examples_per_class * (1 - val_fraction)))
    parts = {"train": full.images[:, :cut], "val": full.images[:, cut:]}
    pools = {
        split: ClassPool(
            f"{dataset.name}/{split}", imgs, full.class_names, full.alphabets, full.mean, full.std
        )
        for split, imgs in parts.items()
    }
    test = class_pool(dataset.name, dataset.test, dataset.num_classes, dataset.mean, dataset.std)
    pools["test"] = ClassPool(
        f"{dataset.name}/test", test.images, test.class_names, test.alphabets, test.mean, test.std
    )
    return pools
