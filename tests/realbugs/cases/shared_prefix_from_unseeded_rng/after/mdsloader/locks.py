import os
import time


class FolderBarrier:
    """A crude file-based meeting point for the processes of one node."""

    def __init__(self, path, creator):
        self.path = path
        if creator:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            open(path, "a").close()

    def wait(self, timeout=60.0):
        start = time.time()
        while not os.path.exists(self.path):
            if time.time() - start > timeout:
                raise TimeoutError(self.path)
            time.sleep(0.05)
