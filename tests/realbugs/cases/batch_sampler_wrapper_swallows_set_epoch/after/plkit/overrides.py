from typing import Iterable, List, Union

from torch.utils.data import BatchSampler, Sampler


class IndexRecordingBatchSampler:
    """Wraps a batch sampler and remembers the indices it yielded (for prediction)."""

    def __init__(self, batch_sampler: BatchSampler) -> None:
        self.seen_batch_indices: List[List[int]] = []
        self._batch_sampler = batch_sampler

    def __iter__(self):
        self.seen_batch_indices = []
        for batch in self._batch_sampler:
            self.seen_batch_indices.append(batch)
            yield batch

    def __len__(self) -> int:
        return len(self._batch_sampler)

    @property
    def sampler(self) -> Union[Sampler, Iterable]:
        return self._batch_sampler.sampler

    def set_epoch(self, epoch: int) -> None:
        if hasattr(self._batch_sampler, "set_epoch"):
            self._batch_sampler.set_epoch(epoch)
