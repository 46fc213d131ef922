// The stand-in Arduino core's definitions (Arduino.h): Serial to stdout,
// the host's clock, and main() calling setup() once and loop()
// $FERRY_SKETCH_LOOPS times (default 3) without the sketch's delays.
#include "Arduino.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

StandInSerial Serial;

namespace {
unsigned long since_start_us() {
  static timespec start = [] {
    timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t;
  }();
  timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<unsigned long>((now.tv_sec - start.tv_sec) * 1000000L + (now.tv_nsec - start.tv_nsec) / 1000);
}
}  // namespace

unsigned long millis() { return since_start_us() / 1000; }
unsigned long micros() { return since_start_us(); }
void delay(unsigned long) {}

void StandInSerial::begin(unsigned long) {}
size_t StandInSerial::print(const char* s) { return static_cast<size_t>(printf("%s", s)); }
size_t StandInSerial::print(char c) { return static_cast<size_t>(printf("%c", c)); }
size_t StandInSerial::print(unsigned long v) { return static_cast<size_t>(printf("%lu", v)); }
size_t StandInSerial::print(long v) { return static_cast<size_t>(printf("%ld", v)); }
size_t StandInSerial::print(double v, int digits) { return static_cast<size_t>(printf("%.*f", digits, v)); }
size_t StandInSerial::println() { return static_cast<size_t>(printf("\n")); }

int main() {
  const char* env = getenv("FERRY_SKETCH_LOOPS");
  const int loops = env ? atoi(env) : 3;
  setup();
  for (int i = 0; i < loops; ++i) loop();
  return 0;
}
