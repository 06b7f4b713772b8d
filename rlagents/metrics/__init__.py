"""Metrics to CSV and TensorBoard, and learning-curve plots (host code)."""

from rlagents.metrics._machine import cpu_model
from rlagents.metrics._writer import MetricsWriter
from rlagents.metrics._writer import plot_learning_curves
from rlagents.metrics._writer import read_csv

__all__ = ["MetricsWriter", "cpu_model", "plot_learning_curves", "read_csv"]
