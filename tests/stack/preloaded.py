"""Whether a process has the pipeline tasks' libraries loaded (kb_airflow/preload.py): its
memory maps hold the C extensions of what the index task imports, pandas (under Great
Expectations) and ONNX Runtime. Pure-Python modules leave no trace in the maps."""

from pathlib import Path


def task_libraries_loaded(pid: int) -> bool:
    maps = Path(f"/proc/{pid}/maps").read_text()
    return "/pandas/_libs/" in maps and "onnxruntime_pybind11_state" in maps
