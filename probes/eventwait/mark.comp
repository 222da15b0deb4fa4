#version 450
// Writes the round's number into the host's flag word (system scope through volatile).
layout(local_size_x = 1) in;
layout(std430, set = 0, binding = 0) coherent volatile buffer Out { uint flag; } o;
layout(push_constant) uniform P { uint value; } p;
void main() { o.flag = p.value; }
