// The translation unit that builds the test targets' shared precompiled header
// (VBTS_TEST_PCH in CMakeLists.txt); it has no code of its own.
