"""Stage ir: a family's circuit lowered to the prefill and decode op graphs, one C provider per op
(kernel maps, provider resolution)."""
