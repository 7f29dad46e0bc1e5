from setuptools import find_packages, setup

setup(
    name="cosent-tf",
    version="0.2.0",
    description="CoSENT and its baselines for Chinese text matching on TensorFlow/Keras 2 (bert4keras)",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    packages=find_packages(include=["cosent_tf", "cosent_tf.*"]),
    package_data={"cosent_tf": ["configs/*.json"]},
    python_requires=">=3.9",
    # bert4keras is installed separately with --no-deps: its metadata pins keras<=2.3.1,
    # which would replace the Keras 2 that TensorFlow needs (see README, "Install").
    install_requires=[
        "tensorflow==2.21.0",
        "tf-keras==2.21.0",
        "tensorflow-text==2.21.1",
        "numpy>=1.24",
        "scipy>=1.10",
        "jieba==0.42.1",
        "tqdm>=4.60",
        "matplotlib>=3.7",
    ],
    extras_require={"test": ["pytest>=7", "hypothesis>=6"]},
    entry_points={"console_scripts": ["cosent-tf=cosent_tf.cli:main"]},
)
