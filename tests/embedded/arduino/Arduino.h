// A stand-in for the few parts of the Arduino core that the export's sketch
// (examples/FerryStream) uses, so that scripts/test-embedded.sh can compile
// the sketch as Arduino does (this header included first, the .ino as C++)
// and run it on the build machine: Serial prints to stdout, the clock is the
// host's, loop() runs $FERRY_SKETCH_LOOPS times (arduino_main.cpp).
#pragma once

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

unsigned long millis();
unsigned long micros();
void delay(unsigned long ms);

class StandInSerial {
 public:
  void begin(unsigned long baud);
  explicit operator bool() const { return true; }
  size_t print(const char* s);
  size_t print(char c);
  size_t print(unsigned long v);
  size_t print(long v);
  size_t print(int v) { return print(static_cast<long>(v)); }
  size_t print(unsigned int v) { return print(static_cast<unsigned long>(v)); }
  size_t print(double v, int digits = 2);
  size_t println();
  template <typename T>
  size_t println(T v) {
    return print(v) + println();
  }
};
extern StandInSerial Serial;

void setup();
void loop();
