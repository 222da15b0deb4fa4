#version 450
#extension GL_GOOGLE_include_directive : require
// relay, its wait bounded by a count of polls (devices without VK_KHR_shader_clock's
// shaderDeviceClock). The kernel is described in relay.glsl.
#include "relay.glsl"
