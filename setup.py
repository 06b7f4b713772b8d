"""rlagents: train tool-using language-model agents with reinforcement learning in JAX."""

import setuptools

INSTALL_REQUIRES = [
    "jax>=0.6",
    "flax>=0.10",
    "optax>=0.2.4",
    "orbax-checkpoint>=0.11",
    "chex>=0.1.88",
    "absl-py>=2.1",
    "ml-collections>=1.0",
    # transformers 5.25 needs a `kernels` release the package index does not serve.
    "transformers>=4.50,<5.25",
    "tokenizers>=0.21",
    "jinja2>=3.1",
    # Task data: TFDS builds and reads array_record without TensorFlow.
    "tensorflow-datasets>=4.9.7",
    "array-record>=0.5",
    # TFDS 4.9.10 imports importlib_resources for builders outside its tree but declares it only
    # for Python < 3.9 (tensorflow/datasets#11212).
    "importlib_resources>=6",
    "tensorboardX>=2.6",
    "matplotlib>=3.8",
    "tqdm>=4.66",
    "numpy>=1.26",
    # Games and search (rlagents.envs turn-based games, rlagents.search): small pure-Python
    # packages on top of jax (pgx adds svgwrite), so a regular dependency rather than an extra;
    # rlagents.search imports mctx at module level.
    "pgx>=2.6",
    "mctx>=0.0.5",
]

EXTRAS_REQUIRE = {
    # PyTorch only as the reference the Hugging Face checkpoint tests compare against.
    # nbclient, nbformat and ipykernel run the notebooks in colabs/ headless (tests/colabs).
    "test": ["pytest>=8", "pytest-xdist>=3.5", "torch==2.13.0", "nbclient>=0.10", "nbformat>=5.10",
             "ipykernel>=6.29"],
    # Craftax-Classic behind rlagents.envs (`envs.make("craftax/Craftax-Classic-Symbolic-v1")`).
    "craftax": ["craftax>=1.6"],
    "cuda12": ["jax[cuda12]"],
    "tpu": ["jax[tpu]"],
}

setuptools.setup(
    name="rlagents",
    version="0.1.0",
    description="Train tool-using language-model agents with reinforcement learning in JAX.",
    packages=setuptools.find_packages(include=["rlagents", "rlagents.*", "experiments", "experiments.*"]),
    python_requires=">=3.10",
    install_requires=INSTALL_REQUIRES,
    extras_require=EXTRAS_REQUIRE,
)
