"""Writing model files atomically, shared by make_torchvision.py and
train_fmnist.py."""
import os
import shutil
import tempfile


def atomic_write(path, writer):
    """writer(tmp_path) then rename to path.  The temporary file lives in a
    private folder under the final basename, because torch.jit.save names the
    archive's root folder after the file name (keeps output deterministic)."""
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    tmpdir = tempfile.mkdtemp(prefix=".tmp-", dir=d)
    tmp = os.path.join(tmpdir, os.path.basename(path))
    try:
        writer(tmp)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)
