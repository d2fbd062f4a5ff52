#!/usr/bin/python3
"""Fashion-MNIST test/calibration data for tao-quant tests and demos.

Reads the IDX files shipped by Debian's `dataset-fashion-mnist` package and
writes, deterministically:

  OUTDIR/test.npz        x float32 [10000,1,28,28] (normalized), y int64 [10000]
  OUTDIR/calib.npz       x float32 [512,1,28,28] (normalized), y int64 [512]
                         512 TRAIN images picked with a fixed seed
  OUTDIR/calib_png/<class>/<idx>.png   the same 512 images, 8-bit grayscale
  OUTDIR/test_png/<class>/<idx>.png    the first 1000 test images

Normalization: x = (pixel / 255 - MEAN) / STD with MEAN=0.2860, STD=0.3530.
PNG files hold the raw 0..255 pixels (a loader must apply the same
normalization).  Class folders are named "<label>_<name>" so that sorting the
folder names gives the label order (as torchvision's ImageFolder assumes).
<idx> is the image's index in its split (train for calib, t10k for test).

Usage: fmnist_data.py OUTDIR [--data-dir DIR]

Every file is written to a temporary name and renamed into place; PNG folders
are built in a temporary folder and renamed as a whole.  Torch is not needed
here (numpy only), and the module is imported by train_fmnist.py.
"""

import argparse
import gzip
import os
import shutil
import struct
import sys
import tempfile
import zlib

import numpy as np

DATA_DIR = "/usr/share/datasets/fashion-mnist"
MEAN = 0.2860
STD = 0.3530
CALIB_SIZE = 512
CALIB_SEED = 20240601
TEST_PNG_COUNT = 1000
CLASS_NAMES = [
    "tshirt_top", "trouser", "pullover", "dress", "coat",
    "sandal", "shirt", "sneaker", "bag", "ankle_boot",
]
CLASS_DIRS = ["%d_%s" % (i, n) for i, n in enumerate(CLASS_NAMES)]


def read_idx(path):
    """Parses a (gzipped) IDX file into a numpy array."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    zero, dtype_code, ndim = struct.unpack(">HBB", data[:4])
    if zero != 0 or dtype_code != 0x08:
        raise ValueError("%s: not an unsigned-byte IDX file" % path)
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    arr = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim)
    if arr.size != int(np.prod(dims)):
        raise ValueError("%s: size mismatch" % path)
    return arr.reshape(dims)


def load_split(split, data_dir=DATA_DIR):
    """Returns (images uint8 [N,28,28], labels int64 [N]); split: train|t10k."""
    images = read_idx(os.path.join(data_dir, "%s-images-idx3-ubyte.gz" % split))
    labels = read_idx(os.path.join(data_dir, "%s-labels-idx1-ubyte.gz" % split))
    if images.shape[0] != labels.shape[0]:
        raise ValueError("%s: %d images but %d labels" % (split, images.shape[0], labels.shape[0]))
    return images, labels.astype(np.int64)


def normalize(images_u8):
    """uint8 [N,28,28] -> float32 [N,1,28,28], normalized."""
    x = images_u8.astype(np.float32) / np.float32(255.0)
    x = (x - np.float32(MEAN)) / np.float32(STD)
    return np.ascontiguousarray(x[:, None, :, :], dtype=np.float32)


def calib_indices(num_train):
    """The fixed, sorted choice of CALIB_SIZE train indices."""
    rng = np.random.RandomState(CALIB_SEED)
    return np.sort(rng.choice(num_train, size=CALIB_SIZE, replace=False))


def png_bytes(gray_u8):
    """Encodes a 2-D uint8 array as an 8-bit grayscale PNG (no PIL needed)."""
    h, w = gray_u8.shape

    def chunk(tag, payload):
        body = tag + payload
        return struct.pack(">I", len(payload)) + body + struct.pack(">I", zlib.crc32(body) & 0xFFFFFFFF)

    # Each scanline starts with filter type 0 (None).
    raw = b"".join(b"\x00" + gray_u8[r].tobytes() for r in range(h))
    ihdr = struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0)  # 8-bit, grayscale
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr)
            + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


def save_npz_atomic(path, **arrays):
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".npz", dir=d)
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **arrays)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_png_tree_atomic(dest, images_u8, labels, indices):
    """Writes dest/<class>/<idx>.png via a temporary folder + rename."""
    parent = os.path.dirname(os.path.abspath(dest))
    tmp = tempfile.mkdtemp(prefix=".tmp-png-", dir=parent)
    try:
        for name in CLASS_DIRS:
            os.mkdir(os.path.join(tmp, name))
        for img, label, idx in zip(images_u8, labels, indices):
            p = os.path.join(tmp, CLASS_DIRS[int(label)], "%05d.png" % int(idx))
            with open(p, "wb") as f:
                f.write(png_bytes(img))
        for root, dirs, _ in os.walk(tmp):
            for dname in dirs:
                os.chmod(os.path.join(root, dname), 0o755)
        os.chmod(tmp, 0o755)
        if os.path.exists(dest):
            shutil.rmtree(dest)
        os.rename(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("outdir")
    ap.add_argument("--data-dir", default=DATA_DIR,
                    help="folder with the Fashion-MNIST .gz IDX files (default %(default)s)")
    args = ap.parse_args(argv)

    os.makedirs(args.outdir, exist_ok=True)
    train_x, train_y = load_split("train", args.data_dir)
    test_x, test_y = load_split("t10k", args.data_dir)

    save_npz_atomic(os.path.join(args.outdir, "test.npz"), x=normalize(test_x), y=test_y)

    ci = calib_indices(train_x.shape[0])
    save_npz_atomic(os.path.join(args.outdir, "calib.npz"),
                    x=normalize(train_x[ci]), y=train_y[ci])

    write_png_tree_atomic(os.path.join(args.outdir, "calib_png"), train_x[ci], train_y[ci], ci)
    n = min(TEST_PNG_COUNT, test_x.shape[0])
    write_png_tree_atomic(os.path.join(args.outdir, "test_png"), test_x[:n], test_y[:n], np.arange(n))

    print("fmnist_data: wrote test.npz (%d), calib.npz (%d), calib_png (%d), test_png (%d) in %s"
          % (test_x.shape[0], len(ci), len(ci), n, args.outdir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
