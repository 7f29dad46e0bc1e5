import re

from setuptools import find_packages, setup

with open("README.md", encoding="utf-8") as f:
    README = f.read()
# The version lives in cosent_tf/__init__.py alone; reading it there keeps setup.py from importing the package.
with open("cosent_tf/__init__.py", encoding="utf-8") as f:
    VERSION = re.search(r'^__version__ = "([^"]+)"$', f.read(), re.M).group(1)

setup(
    name="cosent-tf",
    version=VERSION,
    description="CoSENT and its baselines for Chinese text matching on TensorFlow/Keras 2 (bert4keras)",
    long_description=README,
    long_description_content_type="text/markdown",
    packages=find_packages(include=["cosent_tf", "cosent_tf.*"]),
    # py.typed: the package's annotations are meant for type checkers (PEP 561)
    package_data={"cosent_tf": ["configs/*.json", "py.typed"]},
    python_requires=">=3.9",
    # bert4keras 0.11.5 is installed separately with --no-deps: its metadata pins keras<=2.3.1,
    # which would replace the Keras 2 that TensorFlow needs (the Makefile's install step does this).
    #
    # Where the code relies on private internals, which is why TensorFlow, tf-keras and
    # tensorflow-text stay within 2.21.x (tensorflow-text must match TensorFlow's minor version):
    # - cosent_tf/models/architectures.py: bert4keras's transformer classes and the module globals
    #   its blocks take their Dense layer from (install_token_dense); its layer names are also used
    #   by models/builders.py's first_token_output;
    # - cosent_tf/backend.py: tf-keras's seed generator, RandomGenerator.dropout (replaced for
    #   repeatable_dropout) and TensorFlow's eager seed state;
    # - cosent_tf/callbacks.py: StepBackup calls BackupAndRestore._backup and reads _current_epoch;
    #   on Keras 3 it sets the model's _initial_epoch, as Keras 3's own BackupAndRestore does;
    # - cosent_tf/optimizers.py: FusedAdam reads Adam's _index_dict, _var_key, _momentums, _velocities;
    # - cosent_tf/export/onnx_export.py: tf2onnx's table of graph optimizers (the [onnx] extra pins tf2onnx).
    # The rest are ranges.
    install_requires=[
        "tensorflow>=2.21,<2.22",
        "tf-keras>=2.21,<2.22",
        "tensorflow-text>=2.21,<2.22",
        # keras.callbacks.TensorBoard needs it, and TensorFlow no longer brings it
        "tensorboard>=2.21,<2.22",
        "numpy>=1.24",
        "scipy>=1.10",
        "jieba>=0.42",
        "tqdm>=4.60",
        "matplotlib>=3.7",
        "safetensors>=0.4",
    ],
    extras_require={
        # pytest-xdist runs the suite on every core; filelock lets its workers share the fixture zoo
        "test": ["pytest>=7", "pytest-xdist>=3.6", "filelock>=3.12", "hypothesis>=6", "ruff>=0.6", "mypy>=1.10"],
        # reading a Hugging Face folder's pytorch_model.bin (model.safetensors needs no torch)
        "torch": ["torch>=2.1"],
        # ONNX export (tf2onnx converts the Keras graph; pinned: cosent_tf/export/onnx_export.py passes it
        # a list of its optimizers, a private table) and serving with --runtime onnx (onnxruntime alone)
        "onnx": ["tf2onnx>=1.17,<1.18", "onnx>=1.16", "onnxruntime>=1.20"],
        # approximate search indexes (search build --index hnsw|ivf): HNSW, IVF and binary indexes; 1.15
        # reads all six structures memory-mapped (IO_FLAG_MMAP_IFC, cosent_tf/inference/ann.py)
        "ann": ["faiss-cpu>=1.15"],
        # the Keras 3 route (cosent_tf.keras3): Keras 3 beside tf-keras, keras-hub's backbones, and JAX
        # (the CPU wheel) as its second backend; keras-hub 0.32 is the release its converters were written against
        "keras3": ["keras>=3.15,<4", "keras-hub>=0.32,<0.33", "jax[cpu]>=0.10"],
    },
    entry_points={"console_scripts": ["cosent-tf=cosent_tf.cli:console_main"]},
)
