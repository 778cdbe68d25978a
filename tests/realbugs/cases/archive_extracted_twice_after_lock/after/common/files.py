import os
import shutil
import tarfile

from filelock import FileLock


def cached_archive(archive_path, extract_root, force_extract=False):
    """Extract archive_path under extract_root once; return the extracted folder."""
    extraction_path = os.path.join(extract_root, os.path.basename(archive_path) + "-extracted")
    if os.path.isdir(extraction_path) and os.listdir(extraction_path) and not force_extract:
        return extraction_path

    with FileLock(extraction_path + ".lock"):
        if os.path.isdir(extraction_path) and os.listdir(extraction_path) and not force_extract:
            return extraction_path
        shutil.rmtree(extraction_path, ignore_errors=True)
        tmp = extraction_path + ".tmp"
        with tarfile.open(archive_path) as tf:
            tf.extractall(tmp, filter="data")
        os.replace(tmp, extraction_path)
    return extraction_path
