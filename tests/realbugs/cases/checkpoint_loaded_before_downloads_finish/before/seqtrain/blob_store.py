import shutil
import urllib.request


def fetch_latest(remote_dir: str, local_path: str, suffix: str) -> None:
    """Copy the newest checkpoint ending in ``suffix`` from ``remote_dir`` to ``local_path``."""
    with urllib.request.urlopen(f"{remote_dir}/latest{suffix}") as src, open(local_path, "wb") as dst:
        shutil.copyfileobj(src, dst)
