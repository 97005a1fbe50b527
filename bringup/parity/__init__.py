"""Stage parity: the native program against independent oracles (llama.cpp, the float64 reference);
X-ray localises the first op where they part."""
