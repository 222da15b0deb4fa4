#version 450
#extension GL_GOOGLE_include_directive : require
// relay, its wait bounded by the device clock (VK_KHR_shader_clock, shaderDeviceClock).
// The kernel is described in relay.glsl.
#define TPAR_RELAY_CLOCK 1
#include "relay.glsl"
