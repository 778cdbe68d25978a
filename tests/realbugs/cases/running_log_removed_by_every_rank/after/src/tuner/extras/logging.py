import logging
import os
from concurrent.futures import ThreadPoolExecutor

LIVE_LOG = "live_log.txt"


class FileEchoHandler(logging.Handler):
    """Copies log records into a text file that the web dashboard tails."""

    def __init__(self, work_dir: str) -> None:
        super().__init__()
        self._fmt = logging.Formatter(fmt="%(asctime)s %(levelname)s %(message)s")
        self.setLevel(logging.INFO)
        self.writer = ThreadPoolExecutor(max_workers=1)
        os.makedirs(work_dir, exist_ok=True)
        self.live_log = os.path.join(work_dir, LIVE_LOG)
        try:
            os.remove(self.live_log)
        except OSError:
            pass

    def _append(self, line: str) -> None:
        with open(self.live_log, "a", encoding="utf-8") as fh:
            fh.write(line + "\n")

    def emit(self, record) -> None:
        self.writer.submit(self._append, self._fmt.format(record))

    def close(self) -> None:
        self.writer.shutdown(wait=True)
        super().close()


def get_logger(name: str) -> logging.Logger:
    return logging.getLogger(name)
