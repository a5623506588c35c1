"""scripts/gpu-check's parts: tbgen's --gpu backends on a machine with a GPU and no network."""
