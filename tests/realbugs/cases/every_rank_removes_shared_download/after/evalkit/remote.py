import shutil
import urllib.request


def fetch_file(url, dest):
    with urllib.request.urlopen(url) as src, open(dest, "wb") as out:
        shutil.copyfileobj(src, out)
